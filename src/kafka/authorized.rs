//! What the brokers say the client's principal may do to a topic or a consumer group: Kafka's
//! *authorized operations* (KIP-430), which a Metadata or DescribeGroups request returns when
//! asked. It is the one read-only way to learn whether the principal may commit for a group or
//! produce to a topic: an OffsetCommit or a produce would prove it by writing, and DescribeAcls
//! needs a cluster permission the sink's principal should not hold. `check` uses it.
//!
//! Why FFI: librdkafka has it (`rd_kafka_DescribeTopics`, `rd_kafka_DescribeConsumerGroups` with
//! `rd_kafka_AdminOptions_set_include_authorized_operations`), the `rdkafka` crate does not wrap
//! those calls, and its `rdkafka-sys` bindings (re-exported as `rdkafka::bindings`) declare them.
//! This file is the only place the daemon calls them: each call makes a private result queue,
//! waits for the one event on it, copies what it needs into owned values and frees everything
//! before it returns, so nothing of librdkafka's outlives the call.

use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaErrorCode;

/// An operation of Kafka's ACL model, by librdkafka's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
    Describe,
}

impl Operation {
    fn code(self) -> rd::rd_kafka_AclOperation_t {
        match self {
            Operation::Read => rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_READ,
            Operation::Write => rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_WRITE,
            Operation::Describe => rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_DESCRIBE,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "READ",
            Operation::Write => "WRITE",
            Operation::Describe => "DESCRIBE",
        }
    }
}

/// The operations a broker reported as granted on one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    codes: Vec<rd::rd_kafka_AclOperation_t>,
}

impl Granted {
    pub fn allows(&self, op: Operation) -> bool {
        self.codes.contains(&op.code())
    }
}

/// What the brokers answered for one resource: the operations granted, `Ok(None)` when the
/// brokers did not report them (a broker older than Kafka 2.3), or the resource's own error.
pub type Answer = Result<Option<Granted>, Refusal>;

/// An error a broker returned, or the request's own failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: RDKafkaErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn is_authorization(&self) -> bool {
        matches!(
            self.code,
            RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
        )
    }
}

impl Refusal {
    /// The group's coordinator is loading, moving or not elected yet (a fresh cluster's
    /// `__consumer_offsets`): worth asking again.
    pub fn is_coordinator_moving(&self) -> bool {
        matches!(
            self.code,
            RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::CoordinatorNotAvailable
        )
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// A consumer group as DescribeConsumerGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupAnswer {
    /// librdkafka's name of the group's state (`Empty`, `Stable`, `Dead` for a group that does
    /// not exist yet, ...).
    pub state: String,
    pub granted: Answer,
}

/// The operations granted on each of `topics`, in their order (a Metadata request for them with
/// `include_topic_authorized_operations`).
pub fn topics<C: ClientContext>(
    client: &Client<C>,
    topics: &[&str],
    timeout: Duration,
) -> Result<Vec<(String, Answer)>, Refusal> {
    let names: Vec<CString> = topics.iter().map(|t| c_string(t)).collect();
    let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let request = Request::new(
        client,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        timeout,
    )?;
    // SAFETY: the names outlive the call (librdkafka copies them into the collection); the
    // collection is destroyed here, after DescribeTopics copied it into its request.
    let event = unsafe {
        let collection =
            rd::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len());
        rd::rd_kafka_DescribeTopics(request.rk, collection, request.options, request.queue);
        rd::rd_kafka_TopicCollection_destroy(collection);
        request.wait(timeout)?
    };
    // SAFETY: the event is a DescribeTopics result (asked for above) and lives until `event`
    // drops, after every description has been copied out.
    unsafe {
        let result = rd::rd_kafka_event_DescribeTopics_result(event.0);
        let mut count = 0usize;
        let described = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let d = *described.add(i);
            let name = owned(rd::rd_kafka_TopicDescription_name(d));
            let error = rd::rd_kafka_TopicDescription_error(d);
            let answer = match refusal(error) {
                Some(r) => Err(r),
                None => {
                    let mut n = 0usize;
                    let ops = rd::rd_kafka_TopicDescription_authorized_operations(d, &mut n);
                    Ok(granted(ops, n))
                }
            };
            out.push((name, answer));
        }
        Ok(out)
    }
}

/// The state of consumer group `group` and the operations granted on it (a DescribeGroups
/// request with `include_authorized_operations`).
pub fn group<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<GroupAnswer, Refusal> {
    let name = c_string(group);
    let mut pointers = [name.as_ptr()];
    let request = Request::new(
        client,
        rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        timeout,
    )?;
    // SAFETY: librdkafka copies the group names into its request before the call returns.
    let event = unsafe {
        rd::rd_kafka_DescribeConsumerGroups(
            request.rk,
            pointers.as_mut_ptr(),
            pointers.len(),
            request.options,
            request.queue,
        );
        request.wait(timeout)?
    };
    // SAFETY: the event is a DescribeConsumerGroups result and lives until `event` drops, after
    // the description has been copied out.
    unsafe {
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event.0);
        let mut count = 0usize;
        let described = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
        if count == 0 {
            return Err(Refusal {
                code: RDKafkaErrorCode::Fail,
                message: format!("the brokers described no group for {group}"),
            });
        }
        let d = *described;
        let state = owned(rd::rd_kafka_consumer_group_state_name(
            rd::rd_kafka_ConsumerGroupDescription_state(d),
        ));
        let granted = match refusal(rd::rd_kafka_ConsumerGroupDescription_error(d)) {
            Some(r) => Err(r),
            None => {
                let mut n = 0usize;
                let ops = rd::rd_kafka_ConsumerGroupDescription_authorized_operations(d, &mut n);
                Ok(granted(ops, n))
            }
        };
        Ok(GroupAnswer { state, granted })
    }
}

/// One admin request's options and private result queue, freed on drop.
struct Request {
    rk: *mut rd::rd_kafka_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    queue: *mut rd::rd_kafka_queue_t,
}

impl Request {
    fn new<C: ClientContext>(
        client: &Client<C>,
        op: rd::rd_kafka_admin_op_t,
        timeout: Duration,
    ) -> Result<Request, Refusal> {
        let rk = client.native_ptr();
        // SAFETY: `rk` is a live handle for as long as `client` is borrowed, which outlasts
        // this request; the options and the queue are owned by the returned value.
        unsafe {
            let request = Request {
                rk,
                options: rd::rd_kafka_AdminOptions_new(rk, op),
                queue: rd::rd_kafka_queue_new(rk),
            };
            let mut errstr = [0 as c_char; 256];
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            let err = rd::rd_kafka_AdminOptions_set_request_timeout(
                request.options,
                ms,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(Refusal {
                    code: err.into(),
                    message: owned(errstr.as_ptr()),
                });
            }
            let error =
                rd::rd_kafka_AdminOptions_set_include_authorized_operations(request.options, 1);
            if let Some(r) = refusal(error) {
                rd::rd_kafka_error_destroy(error);
                return Err(r);
            }
            Ok(request)
        }
    }

    /// The request's result event, or the request's own error (a timeout, no broker).
    ///
    /// # Safety
    /// An admin request must have been sent to `self.queue`.
    unsafe fn wait(&self, timeout: Duration) -> Result<Event, Refusal> {
        // The request times out on its own after `timeout`; the margin lets its answer arrive.
        let ms = (timeout + Duration::from_secs(5))
            .as_millis()
            .min(i32::MAX as u128) as i32;
        // SAFETY: the queue is live (owned by self); the event is owned by the returned Event.
        unsafe {
            let event = rd::rd_kafka_queue_poll(self.queue, ms);
            if event.is_null() {
                return Err(Refusal {
                    code: RDKafkaErrorCode::OperationTimedOut,
                    message: "no answer from the brokers".into(),
                });
            }
            let event = Event(event);
            let err = rd::rd_kafka_event_error(event.0);
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(Refusal {
                    code: err.into(),
                    message: owned(rd::rd_kafka_event_error_string(event.0)),
                });
            }
            Ok(event)
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: both were created by `Request::new` and are freed once, here.
        unsafe {
            rd::rd_kafka_AdminOptions_destroy(self.options);
            rd::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// A result event, destroyed on drop (with everything its accessors returned).
struct Event(*mut rd::rd_kafka_event_t);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: polled from a queue by `Request::wait`, destroyed once, here.
        unsafe { rd::rd_kafka_event_destroy(self.0) }
    }
}

fn c_string(s: &str) -> CString {
    // A name with a NUL byte cannot exist in Kafka; it is cut there, and the brokers then
    // answer for the name they can read.
    CString::new(s.split('\0').next().unwrap_or_default()).unwrap_or_default()
}

/// # Safety
/// `s` is null or a NUL-terminated string that lives for the call.
unsafe fn owned(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: per the contract above.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// # Safety
/// `error` is null or a live `rd_kafka_error_t`.
unsafe fn refusal(error: *const rd::rd_kafka_error_t) -> Option<Refusal> {
    if error.is_null() {
        return None;
    }
    // SAFETY: per the contract above.
    unsafe {
        let code = rd::rd_kafka_error_code(error);
        if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        Some(Refusal {
            code: code.into(),
            message: owned(rd::rd_kafka_error_string(error)),
        })
    }
}

/// # Safety
/// `ops` is null or points to `n` operations.
unsafe fn granted(ops: *const rd::rd_kafka_AclOperation_t, n: usize) -> Option<Granted> {
    // librdkafka returns no list when the broker did not report the operations.
    if ops.is_null() {
        return None;
    }
    // SAFETY: per the contract above.
    let codes = unsafe { std::slice::from_raw_parts(ops, n) }.to_vec();
    Some(Granted { codes })
}
