//! A limit on each gRPC call's body by its method, applied as the body is read: a result
//! (`Submit`, which carries its proof) may be [`MAX_RESULT_BYTES`], any other call
//! [`MAX_CALL_BYTES`], so that a heartbeat or a registration cannot make the coordinator
//! read and hold a gigabyte before it has looked at who sent it. (tonic's own limit,
//! [`cram_proto::MAX_MESSAGE_BYTES`], is one for the whole service.)

use http_body_util::combinators::MapErr;
use http_body_util::{BodyExt, Limited};
use tonic::codegen::{http, Body, Context, Poll, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

/// The largest body of a call other than `Submit`: a heartbeat or a release of the most
/// units a call may name (1,024) is some 100 KB.
pub const MAX_CALL_BYTES: usize = 1 << 20;

/// The largest body of a result: its proof ([`crate::service::MAX_PROOF_BYTES`]) and
/// room for the rest (at most 10,000 shared facts and 4,096 worker ids: about 1 MB).
pub const MAX_RESULT_BYTES: usize = crate::service::MAX_PROOF_BYTES + (16 << 20);

/// A call's body, limited: past the limit, reading it fails with RESOURCE_EXHAUSTED.
pub type LimitedBody<B> = MapErr<Limited<B>, fn(StdError) -> Status>;

/// What a client that sent too large a call is told (a failure to read the body for
/// another reason keeps its own message).
fn too_large(e: StdError) -> Status {
    if e.is::<http_body_util::LengthLimitError>() {
        Status::resource_exhausted(format!(
            "a call may be at most {MAX_CALL_BYTES} bytes, a result (with its proof) {MAX_RESULT_BYTES}"
        ))
    } else {
        Status::from_error(e)
    }
}

/// The service `S` with each call's body limited by its method.
#[derive(Clone)]
pub struct Gate<S>(pub S);

impl<S: NamedService> Gate<S> {
    /// True for the path of the method whose calls may be large.
    fn large(path: &str) -> bool {
        path.strip_prefix('/').and_then(|p| p.strip_prefix(S::NAME)) == Some("/Submit")
    }
}

impl<S, B> Service<http::Request<B>> for Gate<S>
where
    S: Service<http::Request<LimitedBody<B>>> + NamedService,
    B: Body,
    B::Error: Into<StdError>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let limit = if Self::large(req.uri().path()) { MAX_RESULT_BYTES } else { MAX_CALL_BYTES };
        self.0.call(req.map(|body| Limited::new(body, limit).map_err(too_large as fn(StdError) -> Status)))
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Service as Coordinator;
    use cram_proto::pb::coordinator_server::CoordinatorServer;

    #[test]
    fn only_a_result_may_be_large() {
        type G = Gate<CoordinatorServer<Coordinator>>;
        assert!(G::large("/cram.v1.Coordinator/Submit"));
        for path in [
            "/cram.v1.Coordinator/Heartbeat",
            "/cram.v1.Coordinator/Register",
            "/cram.v1.Coordinator/Submit/",
            "/cram.v1.Coordinator/SubmitX",
            "/cram.v2.Coordinator/Submit",
            "/Submit",
            "cram.v1.Coordinator/Submit",
            "",
        ] {
            assert!(!G::large(path), "{path}");
        }
    }
}
