//! Grants Kafka ACLs on a broker started with `KafkaBroker::start_private_sasl()`, through
//! librdkafka's CreateAcls. FFI because the `rdkafka` crate does not wrap CreateAcls; its
//! `rdkafka-sys` bindings (`rdkafka::bindings`) declare it. Everything librdkafka allocates is
//! freed before [`grant`] returns.

use std::ffi::{CStr, CString, c_char};
use std::time::Duration;

use rdkafka::bindings as rd;

/// What an ACL is on.
#[derive(Debug, Clone, Copy)]
pub enum On<'a> {
    Topic(&'a str),
    Group(&'a str),
}

/// One ACL: `principal` (`User:sink`) is allowed (or denied) `operation` on a resource, from
/// any host.
#[derive(Debug, Clone, Copy)]
pub struct Acl<'a> {
    pub principal: &'a str,
    pub on: On<'a>,
    pub operation: rd::rd_kafka_AclOperation_t,
    pub allow: bool,
}

pub const READ: rd::rd_kafka_AclOperation_t =
    rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_READ;
pub const WRITE: rd::rd_kafka_AclOperation_t =
    rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_WRITE;
pub const DESCRIBE: rd::rd_kafka_AclOperation_t =
    rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_DESCRIBE;

/// Creates `acls` through `bootstrap` (a listener whose principal is a super user) and waits
/// for the broker's answer; panics on any refusal.
pub fn grant(bootstrap: &str, acls: &[Acl<'_>]) {
    let admin = super::kafka::admin_client(bootstrap);
    let rk = admin.inner().native_ptr();
    let mut errstr = [0 as c_char; 512];
    let owned: Vec<(CString, CString, CString)> = acls
        .iter()
        .map(|a| {
            let name = match a.on {
                On::Topic(t) | On::Group(t) => t,
            };
            (
                CString::new(name).expect("name"),
                CString::new(a.principal).expect("principal"),
                CString::new("*").expect("host"),
            )
        })
        .collect();
    // SAFETY: every pointer handed to librdkafka lives until the call that copies it returns;
    // the bindings, options, queue and event are freed below, once each.
    unsafe {
        let mut bindings: Vec<*mut rd::rd_kafka_AclBinding_t> = Vec::new();
        for (a, (name, principal, host)) in acls.iter().zip(&owned) {
            let restype = match a.on {
                On::Topic(_) => rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                On::Group(_) => rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_GROUP,
            };
            let permission = if a.allow {
                rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW
            } else {
                rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_DENY
            };
            let binding = rd::rd_kafka_AclBinding_new(
                restype,
                name.as_ptr(),
                rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL,
                principal.as_ptr(),
                host.as_ptr(),
                a.operation,
                permission,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            assert!(
                !binding.is_null(),
                "acl {a:?}: {}",
                CStr::from_ptr(errstr.as_ptr()).to_string_lossy()
            );
            bindings.push(binding);
        }
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
        );
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), bindings.len(), options, queue);
        let event = rd::rd_kafka_queue_poll(queue, Duration::from_secs(60).as_millis() as i32);
        assert!(!event.is_null(), "no answer to CreateAcls within 60 s");
        let err = rd::rd_kafka_event_error(event);
        let whole = (err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| {
            CStr::from_ptr(rd::rd_kafka_event_error_string(event))
                .to_string_lossy()
                .into_owned()
        });
        let mut refused = Vec::new();
        if whole.is_none() {
            let result = rd::rd_kafka_event_CreateAcls_result(event);
            let mut n = 0usize;
            let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut n);
            for (i, acl) in acls.iter().enumerate().take(n) {
                let error = rd::rd_kafka_acl_result_error(*results.add(i));
                if !error.is_null() && rd::rd_kafka_error_code(error) as i32 != 0 {
                    refused.push(format!(
                        "{acl:?}: {}",
                        CStr::from_ptr(rd::rd_kafka_error_string(error)).to_string_lossy()
                    ));
                }
            }
        }
        rd::rd_kafka_event_destroy(event);
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        for b in bindings {
            rd::rd_kafka_AclBinding_destroy(b);
        }
        assert!(whole.is_none(), "CreateAcls: {whole:?}");
        assert!(refused.is_empty(), "CreateAcls refused {refused:?}");
    }
}
