//! The emulator for tests: in-process on a free loopback port, or the real binary as a child
//! process (for restart tests). Tests reach it only through loopback.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use googleapis_tonic_google_cloud_bigquery_storage_v1::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use kafka_bigquery_sink::bigquery::table_schema::TableSchema;
use kafka_bigquery_sink::emulator::server::{Emulator, EmulatorConfig};
use kafka_bigquery_sink::emulator::store::{Dataset, Store, Table, TableRef};
use tonic::transport::Channel;

/// Starts an in-memory emulator on a free loopback port.
pub async fn start() -> Emulator {
    start_with(EmulatorConfig::local()).await
}

/// Starts an emulator with a custom configuration (the listen address is forced to loopback:0).
pub async fn start_with(mut config: EmulatorConfig) -> Emulator {
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    Emulator::start(config).await.expect("emulator starts")
}

/// A Storage Write API client with message limits large enough for big appends.
pub async fn client(addr: SocketAddr) -> BigQueryWriteClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to the emulator");
    BigQueryWriteClient::new(channel)
        .max_decoding_message_size(256 * 1024 * 1024)
        .max_encoding_message_size(256 * 1024 * 1024)
}

/// Creates dataset `project.dataset` (if missing) and a table with `schema`.
pub fn create_table(store: &Arc<Store>, table: &TableRef, schema: TableSchema) {
    if store.get_dataset(&table.project, &table.dataset).is_none() {
        store
            .insert_dataset(Dataset::new(&table.project, &table.dataset))
            .expect("dataset");
    }
    store
        .insert_table(Table::new(table.clone(), schema))
        .expect("table");
}

/// The real binary running `emulator` as a child process; killed (by its pid) on drop.
pub struct ChildEmulator {
    child: Child,
    pub addr: SocketAddr,
}

impl ChildEmulator {
    /// Spawns `kafka-bigquery-sink emulator --listen 127.0.0.1:0 <extra args>` and waits for its
    /// address line.
    pub fn spawn(extra: &[&str]) -> ChildEmulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kafka-bigquery-sink"))
            .args(["emulator", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the emulator binary");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let started = Instant::now();
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("the emulator did not print its address");
            }
        };
        let addr = line
            .trim()
            .strip_prefix("emulator listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("unexpected first line from the emulator: {line:?}")
            });
        eprintln!("emulator child up on {addr} after {:?}", started.elapsed());
        ChildEmulator { child, addr }
    }

    /// SIGKILL, as a crash would; waits for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
