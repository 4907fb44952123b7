//! The compose cluster under test: its names (project, image tags, host
//! ports), the scripts run against it, what its containers and metrics
//! say, and its removal, also of what earlier runs left behind.

use super::*;

/// Project names this suite creates: `seqsvr-deploy-<pid>-<n>`.
pub(crate) const PROJECT_PREFIX: &str = "seqsvr-deploy-";

/// One compose cluster of this test run, and everything it is named by.
pub(crate) struct Cluster {
    pub(crate) root: PathBuf,
    pub(crate) project: String,
    pub(crate) image: String,
    pub(crate) next_image: String,
    pub(crate) prefix: u16,
    pub(crate) work: tempfile::TempDir,
    pub(crate) seqctl: PathBuf,
}

impl Cluster {
    pub(crate) fn script(&self, path: &str) -> Command {
        let mut c = Command::new(self.root.join(path));
        c.env("COMPOSE_PROJECT_NAME", &self.project)
            .env("SEQSVR_IMAGE", &self.image)
            .env("SEQSVR_UPGRADE_IMAGE", &self.next_image)
            .env("SEQSVR_PORT_PREFIX", self.prefix.to_string())
            .env("SEQSVR_CONFIG_DIR", self.work.path().join("config"))
            .env("SEQSVR_PKI_DIR", self.work.path().join("pki"))
            .env("SEQCTL", &self.seqctl);
        c
    }

    /// seqctl against this cluster, with the operator's credentials.
    pub(crate) fn seqctl(&self, args: &[&str]) -> String {
        let p = self.prefix;
        let addrs = |a: u16| {
            (1..=3)
                .map(|i| format!("127.0.0.1:{p}{}", a + i))
                .collect::<Vec<_>>()
                .join(",")
        };
        let pki = self.work.path().join("pki");
        ok(
            Command::new(&self.seqctl)
                .arg("--store")
                .arg(addrs(110))
                .arg("--store-admin")
                .arg(addrs(120))
                .arg("--alloc")
                .arg(addrs(200))
                .arg("--ca")
                .arg(pki.join("ca.pem"))
                .arg("--cert")
                .arg(pki.join("ops.pem"))
                .arg("--key")
                .arg(pki.join("ops-key.pem"))
                .args(args),
            Duration::from_secs(60),
        )
    }

    /// up.sh; returns the ms from `compose up` to the first number.
    pub(crate) fn up(&self) -> u64 {
        let out = ok(
            &mut self.script("deploy/compose/up.sh"),
            Duration::from_secs(300),
        );
        let line = out
            .lines()
            .find(|l| l.starts_with("first number"))
            .unwrap_or_else(|| panic!("up.sh printed no first number:\n{out}"));
        // "first number N after MS ms (...)"
        line.split_whitespace()
            .nth(4)
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("unreadable: {line}"))
    }

    pub(crate) fn host_port(&self, offset: u16) -> u16 {
        self.prefix * 1000 + offset
    }

    /// What Docker's health check (`seqctl health --ready` in the
    /// container) last said of `service`: `starting`, `healthy` or
    /// `unhealthy`.
    pub(crate) fn docker_health(&self, service: &str) -> String {
        let id = ok(
            Command::new("docker").args([
                "ps",
                "-q",
                "--filter",
                &format!("label=com.docker.compose.project={}", self.project),
                "--filter",
                &format!("label=com.docker.compose.service={service}"),
            ]),
            Duration::from_secs(30),
        );
        let id = id.lines().next().unwrap_or_default().to_string();
        assert!(!id.is_empty(), "no container for {service}");
        ok(
            Command::new("docker").args(["inspect", "-f", "{{.State.Health.Status}}", &id]),
            Duration::from_secs(30),
        )
        .trim()
        .to_string()
    }

    /// `seqctl health --ready` from the host against a published client
    /// port, with the cluster's CA: exit code and line.
    pub(crate) fn health(&self, offset: u16) -> (Option<i32>, String) {
        let out = run(
            Command::new(&self.seqctl)
                .arg("--ca")
                .arg(self.work.path().join("pki/ca.pem"))
                .args(["health", "--ready"])
                .arg(format!("127.0.0.1:{}", self.host_port(offset))),
            Duration::from_secs(30),
        );
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.code(), line)
    }
}

/// Every service of the compose cluster.
pub(crate) const SERVICES: [&str; 6] = [
    "store-1", "store-2", "store-3", "alloc-1", "alloc-2", "alloc-3",
];

impl Drop for Cluster {
    /// Removes what this run created, by name: the compose project
    /// (containers, networks, volumes) and the two image tags.
    fn drop(&mut self) {
        say!("tearing down project {}", self.project);
        quietly(self.script("deploy/compose/down.sh").arg("-v"));
        remove_project_leftovers(&self.project);
        for image in [&self.image, &self.next_image] {
            quietly(Command::new("docker").args(["rmi", "-f", image]));
        }
    }
}

/// Whatever `docker-compose down` did not remove of `project`.
pub(crate) fn remove_project_leftovers(project: &str) {
    let label = format!("label=com.docker.compose.project={project}");
    for (kind, list) in [
        ("container", vec!["ps", "-aq", "--filter", &label]),
        ("network", vec!["network", "ls", "-q", "--filter", &label]),
        ("volume", vec!["volume", "ls", "-q", "--filter", &label]),
    ] {
        let Ok(out) = Command::new("docker").args(&list).output() else {
            continue;
        };
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let rm: &[&str] = match kind {
                "container" => &["rm", "-f", "-v"],
                "network" => &["network", "rm"],
                _ => &["volume", "rm", "-f"],
            };
            quietly(Command::new("docker").args(rm).arg(id));
        }
    }
}

/// Projects (and image tags) an earlier run of this suite left behind when
/// it was killed: named after a process that no longer exists.
pub(crate) fn remove_stale_runs() {
    let Ok(out) = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=com.docker.compose.project",
            "--format",
            "{{.Label \"com.docker.compose.project\"}}",
        ])
        .output()
    else {
        return;
    };
    let stale = |name: &str| {
        name.strip_prefix(PROJECT_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !pid_alive(pid))
    };
    let projects: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|p| stale(p))
        .map(str::to_string)
        .collect();
    for p in projects {
        say!("removing project {p} left by an earlier run");
        remove_project_leftovers(&p);
    }
    if let Ok(out) = Command::new("docker")
        .args(["images", "seqsvr", "--format", "{{.Tag}}"])
        .output()
    {
        for tag in String::from_utf8_lossy(&out.stdout).lines() {
            if stale(&format!(
                "{PROJECT_PREFIX}{}",
                tag.trim_start_matches("deploy-")
            )) {
                quietly(Command::new("docker").args(["rmi", "-f", &format!("seqsvr:{tag}")]));
            }
        }
    }
}

/// A two-digit port prefix whose host ports are all free (the compose
/// cluster publishes `<prefix>111` … `<prefix>233` on 127.0.0.1).
pub(crate) fn free_prefix() -> u16 {
    let offsets = [
        111, 112, 113, 121, 122, 123, 131, 132, 133, 201, 202, 203, 221, 222, 223, 231, 232, 233,
    ];
    let start = std::process::id() as u16 % 12;
    // Below the usual ephemeral range first (32768 on).
    let order = (0..12)
        .map(|i| 20 + (start + i) % 12)
        .chain(33..=60)
        .collect::<Vec<u16>>();
    order
        .into_iter()
        .find(|p| {
            offsets
                .iter()
                .all(|o| std::net::TcpListener::bind(("127.0.0.1", p * 1000 + o)).is_ok())
        })
        .expect("no free port prefix")
}

/// `GET /metrics` over plain HTTP.
pub(crate) fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics listener");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).expect("metrics response");
    assert!(body.starts_with("HTTP/1.1 200"), "metrics: {body:.200}");
    body
}

/// The sum of every sample of `metric` in a scrape.
pub(crate) fn sum_of(scrape: &str, metric: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
