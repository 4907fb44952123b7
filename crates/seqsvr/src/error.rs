//! The crate's one error type: what `seqsvr` and `seqctl` can fail with.
//!
//! The component crates' errors convert as they are (their messages already
//! name the file, key or address at fault); a file or process operation
//! says what it was doing ([`Error::Io`]); [`Context::context`] puts what
//! the command was doing in front of any of them. The binaries print an
//! error with `{}`: every variant's message carries its cause.

/// Everything the binaries' shared code can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store call failed, or a store client or config could not be made.
    #[error(transparent)]
    Store(#[from] seqsvr_store_api::Error),
    /// A call through the sequence-number client failed.
    #[error(transparent)]
    Client(#[from] seqsvr_client::Error),
    /// TLS material, a PKI, a listener or a channel could not be set up.
    #[error(transparent)]
    Net(#[from] seqsvr_net::Error),
    /// An AllocSvr config does not parse or validate.
    #[error(transparent)]
    AllocConfig(#[from] seqsvr_alloc::ConfigError),
    /// An AllocSvr could not start.
    #[error(transparent)]
    AllocNode(#[from] seqsvr_alloc::NodeError),
    /// A gRPC call outside the store clients (an AllocSvr's admin plane,
    /// a health probe) was refused or failed.
    #[error("{}: {}", .0.code(), .0.message())]
    Rpc(#[from] tonic::Status),
    /// A config could not be written as TOML.
    #[error("config as TOML: {0}")]
    Toml(#[from] toml::ser::Error),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (`writing <path>`, `starting store-1`).
        what: String,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },
    /// Standard output could not be written (see [`Error::is_closed_output`]).
    #[error("writing to standard output: {0}")]
    Output(std::io::Error),
    /// A sets command (add, move, status) failed.
    #[error(transparent)]
    Sets(#[from] crate::sets::Error),
    /// A drill caller panicked.
    #[error("drill caller: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A backup could not be read, or a restore was refused (no margin,
    /// one too small).
    #[error(transparent)]
    Restore(#[from] seqsvr_store_core::backup::RestoreError),
    /// Flags or arguments that cannot be used together.
    #[error("{0}")]
    Usage(String),
    /// An operation could not be done; the message says why and, where
    /// there is one, what to do about it.
    #[error("{0}")]
    Failed(String),
    /// What the command was doing when `source` happened.
    #[error("{context}: {source}")]
    Context {
        /// What was being done.
        context: String,
        /// What went wrong.
        #[source]
        source: Box<Error>,
    },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is standard output closed under the command (`seqctl
    /// status | head -1`): the reader has what it wanted, so the command
    /// ends quietly and successfully, as Unix tools do.
    pub fn is_closed_output(&self) -> bool {
        match self {
            Error::Output(e) => e.kind() == std::io::ErrorKind::BrokenPipe,
            Error::Context { source, .. } => source.is_closed_output(),
            _ => false,
        }
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Puts what the command was doing in front of an error.
pub trait Context<T> {
    /// `context: error`.
    fn context(self, context: impl Into<String>) -> Result<T>;
    /// `context(): error`, the context made only on failure.
    fn with_context<S: Into<String>>(self, context: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.with_context(|| context)
    }

    fn with_context<S: Into<String>>(self, context: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context().into(),
            source: Box::new(e.into()),
        })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::Failed(context.into()))
    }

    fn with_context<S: Into<String>>(self, context: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::Failed(context().into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_cause_and_context() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e: Result<()> = Err(Error::io("reading x.pid", io));
        assert_eq!(
            e.context("kill:alloc-1").unwrap_err().to_string(),
            "kill:alloc-1: reading x.pid: gone"
        );
        let store: Result<(), seqsvr_store_api::Error> =
            Err(seqsvr_store_api::Error::NoLeader("election".into()));
        assert_eq!(
            store
                .context("reading the route table")
                .unwrap_err()
                .to_string(),
            "reading the route table: no store leader available: election"
        );
        let none: Option<u8> = None;
        assert_eq!(
            none.context("no store leader answered")
                .unwrap_err()
                .to_string(),
            "no store leader answered"
        );
        let status = tonic::Status::unavailable("connection refused");
        assert_eq!(
            Error::from(status).to_string(),
            "The service is currently unavailable: connection refused"
        );
    }
}
