"""The service kernel every Ferryman server shares (never imported by the SDK): settings,
serving lifecycle (``runtime.run_service``), transport security, telemetry, logs,
metrics. It sits beside the SDK and the wire contract (``ferryman.v1``, ``errors``,
``tensors``, ``schema``) and below the services and the CLI."""
