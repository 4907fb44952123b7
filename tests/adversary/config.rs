//! Config mistakes: part of the adversary suite
//! (`tests/adversary/main.rs`).
//!
//! [`MISTAKES`] is the table: one row per spoilt config (of a store
//! replica or an AllocSvr) with what the process's message must name; the
//! test runs every row in one loop. Adding a case is adding a row.

use super::*;

use std::path::PathBuf;

/// What the mistakes are made of: valid configs to spoil and the files
/// they name.
struct Ctx {
    /// A valid one-member store config, which ran once.
    store: toml::Table,
    /// Its data dir (holding its set and node id 1).
    data: PathBuf,
    /// Its peer address.
    peer: String,
    /// The scratch dir.
    dir: PathBuf,
    /// A PKI with `store-1` and `alloc-1`.
    pki: seqsvr_net::DevPki,
    /// A key file that holds no key.
    garbage_key: PathBuf,
    /// A valid AllocSvr config.
    alloc: String,
}

impl Ctx {
    /// The store config with `f` applied.
    fn store_with(&self, f: impl FnOnce(&mut toml::Table)) -> String {
        let mut t = self.store.clone();
        f(&mut t);
        toml::to_string(&t).unwrap()
    }

    /// The store config with TLS from `tls` and a fresh data dir `data`.
    fn store_tls(&self, data: &str, tls: &seqsvr_net::TlsConfig) -> String {
        self.store_with(|t| {
            let dir = attack::toml_path(&self.dir.join(data));
            t.insert("data_dir".into(), dir.into());
            t.insert("tls".into(), toml::Value::try_from(tls).unwrap());
        })
    }

    /// `name`'s TLS config from the PKI, its key the garbage file.
    fn bad_key(&self, name: &str) -> seqsvr_net::TlsConfig {
        let mut tls = self.pki.tls_config(name);
        tls.key = self.garbage_key.clone();
        tls
    }

    /// `store-1`'s TLS config naming a certificate that does not exist.
    fn no_cert(&self) -> seqsvr_net::TlsConfig {
        let mut tls = self.pki.tls_config("store-1");
        tls.cert = self.dir.join("missing.pem");
        tls
    }
}

fn port() -> String {
    format!("127.0.0.1:{}", kit::free_port())
}

/// One mistake: which process, its config, and what its message must
/// name (besides the file).
struct Mistake {
    kind: &'static str,
    config: fn(&Ctx) -> String,
    names: fn(&Ctx) -> Vec<String>,
}

const MISTAKES: [Mistake; 9] = [
    // An unknown key.
    Mistake {
        kind: "store",
        config: |c| format!("surprise = 1\n{}", c.store_with(|_| {})),
        names: |_| vec!["surprise".into()],
    },
    // A misspelt table.
    Mistake {
        kind: "store",
        config: |c| format!("{}\n[leese]\nlease_ms = 1000\n", c.store_with(|_| {})),
        names: |_| vec!["leese".into()],
    },
    // An unknown key in a table.
    Mistake {
        kind: "store",
        config: |c| {
            c.store_with(|t| {
                let mut l = toml::Table::new();
                l.insert("lease_mss".into(), 1000.into());
                t.insert("lease".into(), l.into());
            })
        },
        names: |_| vec!["lease_mss".into()],
    },
    // A data dir holding another set.
    Mistake {
        kind: "store",
        config: |c| {
            let mut other_set = attack::set();
            other_set.uid_end = 16_000;
            c.store_with(|t| {
                t.insert("set".into(), toml::Value::try_from(other_set).unwrap());
            })
        },
        names: |c| vec!["set".into(), attack::toml_path(&c.data)],
    },
    // A data dir holding another node id.
    Mistake {
        kind: "store",
        config: |c| {
            c.store_with(|t| {
                t.insert("id".into(), 2.into());
                let mut m2 = toml::Table::new();
                m2.insert("id".into(), 2.into());
                m2.insert("addr".into(), port().into());
                let mut m1 = toml::Table::new();
                m1.insert("id".into(), 1.into());
                m1.insert("addr".into(), c.peer.clone().into());
                t.insert(
                    "members".into(),
                    toml::Value::Array(vec![m1.into(), m2.into()]),
                );
            })
        },
        names: |c| vec![attack::toml_path(&c.data), "node".into()],
    },
    // A bad key file.
    Mistake {
        kind: "store",
        config: |c| c.store_tls("data-2", &c.bad_key("store-1")),
        names: |c| vec![attack::toml_path(&c.garbage_key)],
    },
    // A missing certificate.
    Mistake {
        kind: "store",
        config: |c| c.store_tls("data-3", &c.no_cert()),
        names: |c| vec![attack::toml_path(&c.no_cert().cert)],
    },
    // An AllocSvr's unknown key.
    Mistake {
        kind: "alloc",
        config: |c| format!("renew_every_ms = 300\n{}", c.alloc),
        names: |_| vec!["renew_every_ms".into()],
    },
    // An AllocSvr's bad key file.
    Mistake {
        kind: "alloc",
        config: |c| {
            let mut tls = toml::Table::new();
            let key = c.bad_key("alloc-1");
            tls.insert("tls".into(), toml::Value::try_from(&key).unwrap());
            format!("{}{}", c.alloc, toml::to_string(&tls).unwrap())
        },
        names: |c| vec![attack::toml_path(&c.garbage_key)],
    },
];

/// The operator's mistakes stop the process at once with a message naming
/// the file and the key: an unknown key, a misspelt table, an unknown key
/// in a table, a data dir holding another set or another node id, a bad
/// key file, a missing certificate; for an AllocSvr an unknown key and a
/// bad key file. (A copied AllocSvr config — same id — is the twin of the
/// fencing tests.)
///
/// Shown to fail: with `check_stored_set` skipped, the replica started
/// with another set kept running (still running after 20 s, no message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_mistakes_stop_the_process_with_a_message() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = seqsvr_net::DevPki::generate(
        &d.join("pki"),
        &[
            seqsvr_net::Leaf::new(
                "store-1",
                seqsvr_net::Role::Store(seqsvr_net::StoreId::new(0, 1)),
            ),
            seqsvr_net::Leaf::new("alloc-1", seqsvr_net::Role::Alloc("alloc-1".into())),
        ],
        false,
    )
    .unwrap();
    let garbage_key = d.join("garbage-key.pem");
    std::fs::write(
        &garbage_key,
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();

    // A valid one-member store config, as a TOML table to spoil.
    let peer = port();
    let data = d.join("data-1");
    let mut store = toml::Table::new();
    store.insert("id".into(), 1.into());
    store.insert("data_dir".into(), attack::toml_path(&data).into());
    store.insert("client_addr".into(), port().into());
    store.insert("admin_addr".into(), port().into());
    let mut member = toml::Table::new();
    member.insert("id".into(), 1.into());
    member.insert("addr".into(), peer.clone().into());
    store.insert("members".into(), toml::Value::Array(vec![member.into()]));
    store.insert("set".into(), toml::Value::try_from(attack::set()).unwrap());
    seqsvr_store::StoreConfig::from_toml(&toml::to_string(&store).unwrap()).unwrap();

    // First run it for real, so its data dir holds the set and node id 1.
    let good = attack::config_path(d, "store-good");
    std::fs::write(&good, toml::to_string(&store).unwrap()).unwrap();
    let mut p = kit::Proc::start(
        BINS,
        "store-good",
        vec![
            "store".into(),
            "--config".into(),
            good.display().to_string(),
        ],
        d.join("store-good.log"),
    );
    let read = seqsvr_store_api::ReadClient::new(
        &[store["client_addr"].as_str().unwrap().to_string()],
        &seqsvr_store_api::client::plaintext(),
    )
    .unwrap();
    attack::eventually(
        Duration::from_secs(30),
        "the one-member store configures its set",
        || {
            let read = read.clone();
            async move {
                read.status_all()
                    .await
                    .iter()
                    .any(|(_, s)| s.as_ref().is_ok_and(|s| s.set.is_some() && s.leads()))
            }
        },
    )
    .await;
    p.kill9();

    let alloc = format!(
        "id = \"alloc-1\"\naddr = \"{}\"\npeer_addr = \"{}\"\nadmin_addr = \"{}\"\nstore = [\"{peer}\"]\n",
        port(),
        port(),
        port()
    );
    seqsvr_alloc::node::AllocNodeConfig::from_toml(&alloc).unwrap();
    let ctx = Ctx {
        store,
        data,
        peer,
        dir: d.to_path_buf(),
        pki,
        garbage_key,
        alloc,
    };
    let cases: Vec<(&str, String, Vec<String>)> = MISTAKES
        .iter()
        .map(|m| (m.kind, (m.config)(&ctx), (m.names)(&ctx)))
        .collect();

    let mut wrong = Vec::new();
    for (i, (kind, config, names)) in cases.iter().enumerate() {
        let path = attack::config_path(d, &format!("mistake-{i}"));
        std::fs::write(&path, config).unwrap();
        let started = Instant::now();
        let (status, stderr) = attack::run_seqsvr(
            BINS,
            &[kind, "--config", &path.display().to_string()],
            Duration::from_secs(20),
        );
        let message = stderr
            .lines()
            .skip_while(|l| !l.contains("error"))
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '|' || c == '^' || c == ' '))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{kind} mistake {i}: {status:?} after {:?}: {message}",
            started.elapsed()
        );
        match status {
            None => wrong.push(format!("mistake {i}: still running after 20 s")),
            Some(s) if s.success() => wrong.push(format!("mistake {i}: exited 0")),
            Some(_) => {}
        }
        for n in names
            .iter()
            .chain(std::iter::once(&path.display().to_string()))
        {
            if !stderr.contains(n.as_str()) {
                wrong.push(format!(
                    "mistake {i}: the message does not name {n:?}: {stderr}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
