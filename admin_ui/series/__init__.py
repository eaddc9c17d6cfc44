"""Time series for the console: PromQL over Prometheus or over its own scrapes."""
