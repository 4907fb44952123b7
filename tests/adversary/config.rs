//! Config mistakes: part of the adversary suite (`tests/adversary.rs`).

use super::*;

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
    let port = || format!("127.0.0.1:{}", kit::free_port());
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
    let mut p = kit::Proc::start(BINS, 
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

    let with = |f: &dyn Fn(&mut toml::Table)| {
        let mut t = store.clone();
        f(&mut t);
        t
    };
    let other_set = {
        let mut s = attack::set();
        s.uid_end = 16_000;
        s
    };
    let mut cases: Vec<(&str, String, Vec<String>)> = Vec::new();
    let text = |t: &toml::Table| toml::to_string(t).unwrap();
    cases.push((
        "store",
        format!("surprise = 1\n{}", text(&store)),
        vec!["surprise".into()],
    ));
    cases.push((
        "store",
        format!("{}\n[leese]\nlease_ms = 1000\n", text(&store)),
        vec!["leese".into()],
    ));
    cases.push((
        "store",
        text(&with(&|t| {
            let mut l = toml::Table::new();
            l.insert("lease_mss".into(), 1000.into());
            t.insert("lease".into(), l.into());
        })),
        vec!["lease_mss".into()],
    ));
    cases.push((
        "store",
        text(&with(&|t| {
            t.insert(
                "set".into(),
                toml::Value::try_from(other_set.clone()).unwrap(),
            );
        })),
        vec!["set".into(), attack::toml_path(&data)],
    ));
    cases.push((
        "store",
        text(&with(&|t| {
            t.insert("id".into(), 2.into());
            let mut m2 = toml::Table::new();
            m2.insert("id".into(), 2.into());
            m2.insert("addr".into(), port().into());
            let mut m1 = toml::Table::new();
            m1.insert("id".into(), 1.into());
            m1.insert("addr".into(), peer.clone().into());
            t.insert(
                "members".into(),
                toml::Value::Array(vec![m1.into(), m2.into()]),
            );
        })),
        vec![attack::toml_path(&data), "node".into()],
    ));
    let mut bad_key = pki.tls_config("store-1");
    bad_key.key = garbage_key.clone();
    cases.push((
        "store",
        text(&with(&|t| {
            t.insert(
                "data_dir".into(),
                attack::toml_path(&d.join("data-2")).into(),
            );
            t.insert("tls".into(), toml::Value::try_from(&bad_key).unwrap());
        })),
        vec![attack::toml_path(&garbage_key)],
    ));
    let mut no_cert = pki.tls_config("store-1");
    no_cert.cert = d.join("missing.pem");
    cases.push((
        "store",
        text(&with(&|t| {
            t.insert(
                "data_dir".into(),
                attack::toml_path(&d.join("data-3")).into(),
            );
            t.insert("tls".into(), toml::Value::try_from(&no_cert).unwrap());
        })),
        vec![attack::toml_path(&no_cert.cert)],
    ));
    let alloc = format!(
        "id = \"alloc-1\"\naddr = \"{}\"\npeer_addr = \"{}\"\nadmin_addr = \"{}\"\nstore = [\"{peer}\"]\n",
        port(),
        port(),
        port()
    );
    seqsvr_alloc::node::AllocNodeConfig::from_toml(&alloc).unwrap();
    cases.push((
        "alloc",
        format!("renew_every_ms = 300\n{alloc}"),
        vec!["renew_every_ms".into()],
    ));
    let mut alloc_bad_key = pki.tls_config("alloc-1");
    alloc_bad_key.key = garbage_key.clone();
    let mut tls = toml::Table::new();
    tls.insert("tls".into(), toml::Value::try_from(&alloc_bad_key).unwrap());
    cases.push((
        "alloc",
        format!("{alloc}{}", text(&tls)),
        vec![attack::toml_path(&garbage_key)],
    ));

    let mut wrong = Vec::new();
    for (i, (kind, config, names)) in cases.iter().enumerate() {
        let path = attack::config_path(d, &format!("mistake-{i}"));
        std::fs::write(&path, config).unwrap();
        let started = Instant::now();
        let (status, stderr) = attack::run_seqsvr(BINS, 
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
