"""The service kernel every Ferryman server shares (never imported by the SDK): settings,
serving lifecycle (``runtime.run_service``), transport security, telemetry, logs, metrics,
IO schemas and their checks, artifact checksums, canary statistics and the metrics scraper.
It sits above the SDK and the wire contract (``ferryman``) and below the registry, the
services and the CLI."""
