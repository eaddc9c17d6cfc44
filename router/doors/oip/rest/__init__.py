"""The OIP v2 REST door: protocol models, conversion (serving), routes."""
