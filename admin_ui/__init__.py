"""The Streamlit admin console (``ferryman admin``)."""
