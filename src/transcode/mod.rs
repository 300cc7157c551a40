//! Avro → proto2 transcoding: bytes in, bytes out. Knows neither Kafka nor the gRPC client.
