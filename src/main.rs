fn main() -> std::process::ExitCode {
    kafka_bigquery_sink::cli::main()
}
