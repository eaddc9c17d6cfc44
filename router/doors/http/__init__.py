"""The HTTP port: one server for the REST doors (OIP v2, the OpenAI API), its caller
dependency and its error shapes."""
