//! One connection's state and the running of its requests, in order:
//! the auth gate, `MULTI` queues, consecutive `INCR`s coalesced (uids
//! into one backend batch, one name's into one reservation), and every
//! reply in request order.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::BytesMut;

use crate::backend::Backend;
use crate::cmd::counter::Incrs;
use crate::cmd::{self, Fail, Kind, Op};
use crate::parse::Request;
use crate::reply::{Proto, Reply};

pub use crate::state::{Ctx, Session, Stats};

/// The command table's names, in order (for the commands metric).
fn command_names() -> impl Iterator<Item = &'static str> {
    cmd::COMMANDS.iter().map(|s| s.name)
}

/// A `MULTI` under way.
#[derive(Debug, Default)]
pub struct Multi {
    /// The commands queued, planned.
    queued: Vec<Planned>,
    /// Whether a command was refused while queueing (`EXEC` then aborts).
    failed: bool,
}

/// A request ready to run.
#[derive(Debug)]
enum Planned {
    Op(Op),
    Local(cmd::LocalFn, Request),
    Fail(Fail),
    /// `EXEC` of the commands queued.
    Exec(Vec<Planned>),
}

/// A connection: its session and what it runs against.
pub struct Conn<B> {
    backend: Arc<B>,
    ctx: Arc<Ctx>,
    /// The connection's state.
    pub session: Session,
    /// A transaction under way.
    multi: Option<Multi>,
    /// Results not yet encoded (kept between rounds: no allocation per
    /// round).
    results: Vec<Result<Reply, Fail>>,
    /// `INCR`s waiting to go to the backend as one run (kept likewise).
    incrs: Incrs,
    /// Commands run and not yet counted in the door's shared counters,
    /// by position in the command table (the last: unknown names).
    counts: Vec<u64>,
}

impl<B: Backend> Conn<B> {
    /// A new connection's state.
    pub fn new(backend: Arc<B>, ctx: Arc<Ctx>) -> Conn<B> {
        let id = ctx.stats.last_id.fetch_add(1, Relaxed) + 1;
        let authed = ctx.cfg.auth.is_none();
        Conn {
            backend,
            ctx,
            session: Session {
                id,
                proto: Proto::Resp2,
                authed,
                name: None,
                close: false,
            },
            multi: None,
            results: Vec::new(),
            incrs: Incrs::default(),
            counts: vec![0; cmd::COMMANDS.len() + 1],
        }
    }

    /// Answers `reqs` in order, one reply each (none after `QUIT`),
    /// appending their encodings to `wire`, each in the protocol of the
    /// connection when its command had run (`HELLO 3` answers in RESP3,
    /// `RESET` in RESP2).
    pub async fn answer(&mut self, reqs: impl IntoIterator<Item = Request>, wire: &mut BytesMut) {
        let mut results = std::mem::take(&mut self.results);
        let mut incrs = std::mem::take(&mut self.incrs);
        for req in reqs {
            if self.session.close {
                break;
            }
            let step = self.step(req);
            if !matches!(&step, Planned::Op(op) if incrs.fits(op)) {
                // The INCRs before it are answered in the protocol they
                // were asked in.
                self.flush(&mut incrs, &mut results).await;
                self.encode(&mut results, wire);
            }
            self.place(step, &mut incrs, &mut results).await;
            self.encode(&mut results, wire);
        }
        self.flush(&mut incrs, &mut results).await;
        self.encode(&mut results, wire);
        self.results = results;
        self.incrs = incrs;
        self.count();
    }

    /// Adds the commands run since the last call to the door's counters.
    fn count(&mut self) {
        self.ctx.count_commands(&mut self.counts, command_names);
    }

    /// Encodes (and counts) `results` in the connection's protocol now,
    /// leaving it empty.
    fn encode(&self, results: &mut Vec<Result<Reply, Fail>>, wire: &mut BytesMut) {
        for r in results.drain(..) {
            self.reply(r).encode(self.session.proto, wire);
        }
    }

    /// Counts a result and turns it into its reply.
    fn reply(&self, r: Result<Reply, Fail>) -> Reply {
        match r {
            Ok(reply) => reply,
            Err(f) => {
                self.ctx.metrics.errors.with_label_values(&[f.kind]).inc();
                f.reply
            }
        }
    }

    /// Runs `p` now, or (an `INCR`) queues it behind the `INCR`s before
    /// it; anything else first runs those, keeping replies in order.
    async fn place(&mut self, p: Planned, incrs: &mut Incrs, out: &mut Vec<Result<Reply, Fail>>) {
        match p {
            Planned::Op(op) if Incrs::joinable(&op) => {
                if !incrs.fits(&op) {
                    self.flush(incrs, out).await;
                }
                incrs.push(op);
            }
            Planned::Exec(queued) => {
                self.flush(incrs, out).await;
                let r = self.exec(queued).await;
                out.push(Ok(r));
            }
            other => {
                self.flush(incrs, out).await;
                let r = self.run(other).await;
                out.push(r);
            }
        }
    }

    async fn flush(&mut self, incrs: &mut Incrs, out: &mut Vec<Result<Reply, Fail>>) {
        incrs.flush(&*self.backend, out).await;
    }

    async fn run(&mut self, p: Planned) -> Result<Reply, Fail> {
        match p {
            Planned::Op(op) => cmd::counter::run(&*self.backend, op).await,
            Planned::Local(f, req) => {
                // What it reports (`INFO`) counts every command so far.
                self.count();
                f(&req, &mut self.session, &self.ctx)
            }
            Planned::Fail(f) => Err(f),
            Planned::Exec(_) => Err(Fail::err("internal", "EXEC inside EXEC")),
        }
    }

    /// Plans one request in the connection's state now: the auth gate,
    /// `MULTI`/`EXEC`/`DISCARD`, queueing inside a transaction.
    fn step(&mut self, req: Request) -> Planned {
        let Some(i) = cmd::position(&req.args[0]) else {
            self.counts[cmd::COMMANDS.len()] += 1;
            return self.refuse_in_multi(cmd::not_served(&req));
        };
        self.counts[i] += 1;
        let spec = &cmd::COMMANDS[i];
        if spec.name == "reset" {
            // RESET ends a transaction too (the rest it resets itself).
            self.multi = None;
        }
        if !self.session.authed && !spec.flags.contains(&"no-auth") {
            return self.refuse_in_multi(Fail::coded("noauth", "NOAUTH Authentication required."));
        }
        if let Err(f) = cmd::check_arity(spec, &req) {
            return self.refuse_in_multi(f);
        }
        let in_multi = self.multi.is_some();
        match spec.kind {
            Kind::Multi if in_multi => {
                Planned::Fail(Fail::err("multi", "MULTI calls can not be nested"))
            }
            Kind::Multi => {
                self.multi = Some(Multi::default());
                Planned::Local(|_, _, _| Ok(Reply::OK), req)
            }
            Kind::Exec | Kind::Discard if !in_multi => Planned::Fail(Fail::err(
                "multi",
                format!("{} without MULTI", spec.name.to_uppercase()),
            )),
            Kind::Discard => {
                self.multi = None;
                Planned::Local(|_, _, _| Ok(Reply::OK), req)
            }
            Kind::Exec => self.exec_planned(),
            _ if in_multi && matches!(spec.name, "quit" | "reset") => self.plan(spec.kind, req),
            _ if in_multi && matches!(spec.name, "hello" | "auth" | "select") => self
                .refuse_in_multi(Fail::err(
                    "multi",
                    "Command not allowed inside a transaction",
                )),
            _ if in_multi => {
                let p = self.plan(spec.kind, req);
                if let Planned::Fail(f) = p {
                    return self.refuse_in_multi(f);
                }
                if let Some(m) = self.multi.as_mut() {
                    m.queued.push(p);
                }
                Planned::Local(
                    |_, _, _| Ok(Reply::Simple("QUEUED")),
                    Request {
                        args: Default::default(),
                        inline: false,
                    },
                )
            }
            kind => self.plan(kind, req),
        }
    }

    fn plan(&self, kind: Kind, req: Request) -> Planned {
        match kind {
            Kind::Local(f) => Planned::Local(f, req),
            Kind::Counter(plan) => match plan(&req, &self.ctx) {
                Ok(op) => Planned::Op(op),
                Err(f) => Planned::Fail(f),
            },
            Kind::Multi | Kind::Exec | Kind::Discard => Planned::Fail(Fail::err(
                "internal",
                "transaction commands are planned apart",
            )),
        }
    }

    /// An error reply that, inside `MULTI`, also dooms the transaction
    /// (Redis's `EXECABORT`).
    fn refuse_in_multi(&mut self, f: Fail) -> Planned {
        if let Some(m) = self.multi.as_mut() {
            m.failed = true;
        }
        Planned::Fail(f)
    }

    /// `EXEC`: the queued commands, to run as one step.
    fn exec_planned(&mut self) -> Planned {
        let Some(m) = self.multi.take() else {
            return Planned::Fail(Fail::err("multi", "EXEC without MULTI"));
        };
        if m.failed {
            return Planned::Fail(Fail::coded(
                "execabort",
                "EXECABORT Transaction discarded because of previous errors.",
            ));
        }
        Planned::Exec(m.queued)
    }

    /// Runs a transaction's commands in order (its `INCR`s coalesced
    /// too); the reply is the array of their replies.
    async fn exec(&mut self, queued: Vec<Planned>) -> Reply {
        let mut out = Vec::with_capacity(queued.len());
        let mut incrs = Incrs::default();
        for p in queued {
            match p {
                Planned::Op(op) if Incrs::joinable(&op) => {
                    if !incrs.fits(&op) {
                        self.flush(&mut incrs, &mut out).await;
                    }
                    incrs.push(op);
                }
                other => {
                    self.flush(&mut incrs, &mut out).await;
                    let r = self.run(other).await;
                    out.push(r);
                }
            }
        }
        self.flush(&mut incrs, &mut out).await;
        Reply::Array(out.into_iter().map(|r| self.reply(r)).collect())
    }
}
