"""Local development servers: the embedded Kafka broker (``kafka_broker``, KRaft) and the
S3-compatible server (``s3_server``, moto), each started on loopback and stopped by its pid
(``process``). Tests, examples and benchmarks use them; no runtime module imports this package
(an import contract in ``pyproject.toml`` says so)."""
