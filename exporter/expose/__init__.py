"""What exposes the pipeline's reports: the JSON/text diagnosis, the Prometheus collector, the HTTP server."""
