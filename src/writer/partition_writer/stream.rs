//! The writer's stream: a BUFFERED stream of its own created behind the project's quota limiter
//! (exactly once), or the table's `_default` stream (at least once), the append session on it,
//! and what a failed session call does to the writer (wait it out, or end the run).

use std::sync::Arc;

use crate::bigquery::write_client::StreamKind;
use crate::ops::metrics::TableLabel;
use kbq_core::offsets::StreamId;
use kbq_transcode::Plan;

use super::{PartitionWriter, RunEnd, unless_stopped};
use crate::writer::append_session::{AppendSession, SessionError};

impl PartitionWriter {
    /// Opens the writer's stream and its append session, before the first request.
    pub(super) async fn open_stream(&mut self) -> Result<(), RunEnd> {
        let plan = self.plan.clone().expect("a plan before the first row");
        if self.shared.settings.default_stream {
            // At least once: the `_default` stream exists with the table and takes no offsets.
            let name = format!("{}/streams/_default", self.route.table);
            tracing::info!(partition = %self.tp, incarnation = self.incarnation.0, "appending to the default stream");
            return self.start_session(name, &plan, false);
        }
        let name = self.create_buffered_stream().await?;
        self.start_session(name, &plan, true)?;
        self.shared
            .metrics
            .streams_created
            .get_or_create(&TableLabel {
                table: self.route.table_label.clone(),
            })
            .inc();
        let id = self.stream_id.as_ref().expect("just opened");
        tracing::info!(partition = %self.tp, stream = %id, incarnation = self.incarnation.0, "opened write stream");
        Ok(())
    }

    /// Creates this incarnation's BUFFERED stream behind the quota limiter, retrying what time
    /// cures (a denial slowly, readiness false); returns its name.
    async fn create_buffered_stream(&mut self) -> Result<String, RunEnd> {
        unless_stopped(&mut self.stop, self.shared.stream_creation.acquire()).await?;
        let mut backoff = crate::backoff::CREATE_STREAM;
        loop {
            let attempt =
                (self.shared.client).create_write_stream(&self.route.table, StreamKind::Buffered);
            let e = match unless_stopped(&mut self.stop, attempt).await? {
                Ok(stream) => {
                    self.set_retrying(false);
                    return Ok(stream.name);
                }
                Err(e) => e,
            };
            self.shared.metrics.bigquery_error("CreateWriteStream", &e);
            use crate::bigquery::error::ErrorClass::*;
            let pause = match e.class() {
                Transient | Throttled | NotFound => {
                    tracing::warn!(partition = %self.tp, error = %e, "create write stream failed, retrying");
                    backoff.next_delay()
                }
                Denied => {
                    self.set_retrying(true);
                    let pause = self.denied.next_delay();
                    tracing::error!(partition = %self.tp, error = %e, retry_in = ?pause, "create write stream denied, retrying");
                    pause
                }
                _ => return Err(RunEnd::Failed(format!("cannot create a write stream: {e}"))),
            };
            unless_stopped(&mut self.stop, tokio::time::sleep(pause)).await?;
        }
    }

    /// The append session on stream `name`, starting at the rows acknowledged so far. Both
    /// delivery modes build it here, so both count every AppendRows error (one metrics path).
    fn start_session(
        &mut self,
        name: String,
        plan: &Plan,
        explicit_offsets: bool,
    ) -> Result<(), RunEnd> {
        let id = StreamId::from_stream_name(&name)
            .map_err(|e| RunEnd::Failed(format!("bad stream name {}: {}", e.id, e.why)))?;
        let metrics = self.shared.metrics.clone();
        let session = AppendSession::new(
            self.shared.client.clone(),
            name,
            plan.descriptor().clone(),
            self.prefix.rows(),
            self.shared.settings.session.clone(),
        )
        .observe_errors(Arc::new(move |e| metrics.bigquery_error("AppendRows", e)));
        self.session = Some(if explicit_offsets {
            session
        } else {
            session.without_offsets()
        });
        self.shared.metrics.open_streams.inc();
        self.stream_id = Some(id);
        Ok(())
    }

    /// A session call failed. An error a pause may cure — permission denied, credentials, a failed
    /// precondition, or a transient outage that outlasted the session's reconnects — is waited out
    /// with a long backoff, readiness false, and the session resends its requests on its next call
    /// (docs/architecture.md#failure-policies: no permanent stop for these). Anything else ends the
    /// run.
    pub(super) async fn ride_out(&mut self, error: SessionError) -> Result<(), RunEnd> {
        use crate::bigquery::error::ErrorClass;
        let curable = matches!(
            &error,
            SessionError::Failed { error, .. }
                if matches!(error.class(), ErrorClass::Denied | ErrorClass::Transient | ErrorClass::Throttled)
        );
        if !curable {
            return Err(self.session_end(error));
        }
        let pause = self.denied.next_delay();
        tracing::error!(partition = %self.tp, error = %error, retry_in = ?pause, attempt = self.denied.attempts(), "append failed, retrying after a pause");
        self.set_retrying(true);
        unless_stopped(&mut self.stop, tokio::time::sleep(pause)).await
    }

    /// Counts this partition in `kbq_partitions_retrying` (readiness false) or not.
    pub(super) fn set_retrying(&mut self, retrying: bool) {
        if retrying == self.retrying {
            return;
        }
        self.retrying = retrying;
        if retrying {
            self.shared.metrics.partitions_retrying.inc();
        } else {
            self.denied.reset();
            self.shared.metrics.partitions_retrying.dec();
        }
    }

    fn session_end(&self, error: SessionError) -> RunEnd {
        let stream = self.stream_id.clone();
        match (error, stream) {
            (SessionError::Zombie { .. }, Some(s)) => RunEnd::Zombie(s),
            (SessionError::StreamLost { .. }, Some(s)) => RunEnd::Lost(s),
            // Offsets that disagree with ours (ALREADY_EXISTS on a request sent once,
            // OUT_OF_RANGE, an ack at another offset): this stream cannot be trusted with more
            // rows. Abandoning it is safe, the protocol restarts the incarnation on a new
            // stream from what is known visible (the rows in doubt of a checkpoint naming it
            // go through recovery.lost_stream); stopping the partition would stall it for good.
            (SessionError::OffsetConflict { .. }, Some(s)) => RunEnd::Conflict(s),
            (e, _) => RunEnd::Failed(e.to_string()),
        }
    }
}
