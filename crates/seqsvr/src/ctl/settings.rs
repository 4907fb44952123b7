//! Where `seqctl` finds its cluster and credentials. Each setting is taken
//! from the first of:
//!
//! 1. its flag (`--store`, `--store-admin`, `--alloc`, `--ca`, `--cert`,
//!    `--key`, `--dev-dir`, `--port-base`);
//! 2. its environment variable ([`ENV`]: `SEQCTL_STORE`, …);
//! 3. the profile named by `--profile` or `SEQCTL_PROFILE`, a table of a
//!    small TOML file (`SEQCTL_PROFILES`, else
//!    `$XDG_CONFIG_HOME/seqctl/profiles.toml`, else
//!    `~/.config/seqctl/profiles.toml`);
//! 4. the `seqsvr dev` cluster's defaults.
//!
//! See `docs/operations.md`, "seqctl: addresses and credentials".

use std::path::{Path, PathBuf};

use crate::defaults;

/// Each setting's environment variable.
pub const ENV: [(&str, &str); 8] = [
    ("store", "SEQCTL_STORE"),
    ("store_admin", "SEQCTL_STORE_ADMIN"),
    ("alloc", "SEQCTL_ALLOC"),
    ("ca", "SEQCTL_CA"),
    ("cert", "SEQCTL_CERT"),
    ("key", "SEQCTL_KEY"),
    ("dev_dir", "SEQCTL_DEV_DIR"),
    ("port_base", "SEQCTL_PORT_BASE"),
];
/// The profile to use when `--profile` is not given.
pub const PROFILE_ENV: &str = "SEQCTL_PROFILE";
/// The profile file, instead of the default location.
pub const PROFILES_ENV: &str = "SEQCTL_PROFILES";

/// What settings failed with: each names the variable, file or profile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// An environment variable's value does not parse.
    #[error("{name}={value:?}: {why}")]
    BadEnv {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// Why it does not parse.
        why: String,
    },
    /// A profile was asked for but the file cannot be read.
    #[error(
        "profile {profile:?}: cannot read {path}: {why} (set {PROFILES_ENV} to use another file)"
    )]
    Unreadable {
        /// The profile asked for.
        profile: String,
        /// The file.
        path: String,
        /// The operating system's answer.
        why: String,
    },
    /// The profile file is not valid TOML of the expected shape.
    #[error("{path}: {why}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong (with the key at fault).
        why: String,
    },
    /// No table of that name in the file.
    #[error("no profile {profile:?} in {path} (it has: {known})")]
    Unknown {
        /// The profile asked for.
        profile: String,
        /// The file.
        path: String,
        /// The profiles it has, comma-separated.
        known: String,
    },
    /// A profile file location could not be found.
    #[error("profile {0:?}: no profile file: set {PROFILES_ENV}, XDG_CONFIG_HOME or HOME")]
    NoLocation(String),
    /// Settings that do not go together.
    #[error("{0}")]
    Conflict(String),
}

/// One layer of settings (flags, environment or a profile); `None` where
/// the layer says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Store replicas' client planes.
    pub store: Option<Vec<String>>,
    /// Store replicas' admin planes.
    pub store_admin: Option<Vec<String>>,
    /// AllocSvr client planes (seeds).
    pub alloc: Option<Vec<String>>,
    /// The cluster's CA certificate.
    pub ca: Option<PathBuf>,
    /// The operator certificate.
    pub cert: Option<PathBuf>,
    /// Its key.
    pub key: Option<PathBuf>,
    /// The dev cluster's directory.
    pub dev_dir: Option<PathBuf>,
    /// The dev cluster's port base.
    pub port_base: Option<u16>,
}

/// Where a setting came from, as error messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Its flag.
    Flag(&'static str),
    /// Its environment variable.
    Env(&'static str),
    /// A profile (name, file).
    Profile(String),
    /// The dev cluster's defaults.
    Dev,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(flag) => write!(f, "from {flag}"),
            Origin::Env(name) => write!(f, "from {name}"),
            Origin::Profile(p) => write!(f, "from profile {p}"),
            Origin::Dev => f.write_str("the dev cluster's defaults"),
        }
    }
}

/// Settings resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Store replicas' client planes, and where they came from.
    pub store: (Vec<String>, Origin),
    /// Store replicas' admin planes.
    pub store_admin: (Vec<String>, Origin),
    /// AllocSvr seeds.
    pub alloc: (Vec<String>, Origin),
    /// CA, operator certificate and key.
    pub ca: Option<PathBuf>,
    /// The operator certificate.
    pub cert: Option<PathBuf>,
    /// Its key.
    pub key: Option<PathBuf>,
    /// The dev cluster's directory.
    pub dev_dir: PathBuf,
    /// The dev cluster's port base.
    pub port_base: u16,
    /// No address was given anywhere: the dev cluster is meant.
    pub dev: bool,
}

/// Splits a comma-separated list, dropping empty items.
fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// The environment's layer, read through `env`.
pub fn env_layer(env: &dyn Fn(&str) -> Option<String>) -> Result<Layer, SettingsError> {
    let get = |key: &str| {
        let name = ENV.iter().find(|(k, _)| *k == key).expect("known key").1;
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v))
    };
    let port_base = match get("port_base") {
        Some((name, v)) => {
            Some(
                defaults::parse_port_base(v.trim()).map_err(|why| SettingsError::BadEnv {
                    name: name.into(),
                    value: v.clone(),
                    why,
                })?,
            )
        }
        None => None,
    };
    Ok(Layer {
        store: get("store").map(|(_, v)| list(&v)),
        store_admin: get("store_admin").map(|(_, v)| list(&v)),
        alloc: get("alloc").map(|(_, v)| list(&v)),
        ca: get("ca").map(|(_, v)| v.into()),
        cert: get("cert").map(|(_, v)| v.into()),
        key: get("key").map(|(_, v)| v.into()),
        dev_dir: get("dev_dir").map(|(_, v)| v.into()),
        port_base,
    })
}

/// The profile file's path: `SEQCTL_PROFILES`, else under
/// `XDG_CONFIG_HOME`, else under `HOME/.config`.
pub fn profiles_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = set(PROFILES_ENV) {
        return Some(p.into());
    }
    let config = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(config.join("seqctl").join("profiles.toml"))
}

/// Profile `name` of the file at `path`; relative certificate paths are
/// taken from the file's directory.
pub fn load_profile(path: &Path, name: &str) -> Result<Layer, SettingsError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SettingsError::Unreadable {
        profile: name.into(),
        path: shown.clone(),
        why: e.to_string(),
    })?;
    let mut all: std::collections::BTreeMap<String, Layer> =
        toml::from_str(&text).map_err(|e| SettingsError::Parse {
            path: shown.clone(),
            why: e.message().to_string()
                + &e.span()
                    .map(|s| at_line(&text, s.start))
                    .unwrap_or_default(),
        })?;
    let Some(mut p) = all.remove(name) else {
        let known: Vec<&str> = all.keys().map(String::as_str).collect();
        return Err(SettingsError::Unknown {
            profile: name.into(),
            path: shown,
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    for f in [&mut p.ca, &mut p.cert, &mut p.key, &mut p.dev_dir] {
        if let Some(rel) = f.as_ref().filter(|x| x.is_relative()) {
            *f = Some(dir.join(rel));
        }
    }
    if let Some(b) = p.port_base {
        defaults::check_port_base(b).map_err(|why| SettingsError::Parse {
            path: path.display().to_string(),
            why: format!("[{name}] port_base: {why}"),
        })?;
    }
    Ok(p)
}

/// ` (line N)` for byte offset `at` of `text`.
fn at_line(text: &str, at: usize) -> String {
    let line = text[..at.min(text.len())].matches('\n').count() + 1;
    format!(" (line {line})")
}

/// The profile named by `profile` (or `SEQCTL_PROFILE`) and its name;
/// none (empty, nameless) if neither names one.
fn profile_layer(
    profile: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Layer, String), SettingsError> {
    let profile = profile.or_else(|| env(PROFILE_ENV).filter(|p| !p.is_empty()));
    Ok(match profile {
        Some(name) => {
            let path = profiles_path(env).ok_or_else(|| SettingsError::NoLocation(name.clone()))?;
            (load_profile(&path, &name)?, name)
        }
        None => (Layer::default(), String::new()),
    })
}

/// Resolves `flags` over the environment (read through `env`) over the
/// profile named by `profile` (or `SEQCTL_PROFILE`) over the dev defaults.
pub fn resolve(
    flags: Layer,
    profile: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, SettingsError> {
    let envl = env_layer(env)?;
    let (prof, prof_name) = profile_layer(profile, env)?;
    let pick = |f: Option<Vec<String>>,
                e: Option<Vec<String>>,
                p: Option<Vec<String>>,
                flag: &'static str,
                var: &'static str| {
        let f = f.filter(|v| !v.is_empty());
        match (f, e, p) {
            (Some(v), _, _) => Some((v, Origin::Flag(flag))),
            (None, Some(v), _) => Some((v, Origin::Env(var))),
            (None, None, Some(v)) => Some((v, Origin::Profile(prof_name.clone()))),
            _ => None,
        }
    };
    let store = pick(
        flags.store,
        envl.store,
        prof.store,
        "--store",
        "SEQCTL_STORE",
    );
    let store_admin = pick(
        flags.store_admin,
        envl.store_admin,
        prof.store_admin,
        "--store-admin",
        "SEQCTL_STORE_ADMIN",
    );
    let alloc = pick(
        flags.alloc,
        envl.alloc,
        prof.alloc,
        "--alloc",
        "SEQCTL_ALLOC",
    );
    let dev = store.is_none() && store_admin.is_none() && alloc.is_none();
    let port_base = flags
        .port_base
        .or(envl.port_base)
        .or(prof.port_base)
        .unwrap_or(defaults::DEV_PORT_BASE);
    let dev_dir = flags
        .dev_dir
        .or(envl.dev_dir)
        .or(prof.dev_dir)
        .unwrap_or_else(|| defaults::DEV_DIR.into());
    let s = Settings {
        store: store.unwrap_or_else(|| (defaults::dev_store_addrs(port_base), Origin::Dev)),
        store_admin: store_admin
            .unwrap_or_else(|| (defaults::dev_store_admin_addrs(port_base), Origin::Dev)),
        alloc: alloc
            .unwrap_or_else(|| (defaults::dev_alloc_addrs(port_base, &dev_dir), Origin::Dev)),
        ca: flags.ca.or(envl.ca).or(prof.ca),
        cert: flags.cert.or(envl.cert).or(prof.cert),
        key: flags.key.or(envl.key).or(prof.key),
        dev_dir,
        port_base,
        dev,
    };
    if s.cert.is_some() != s.key.is_some() {
        return Err(SettingsError::Conflict(
            "an operator certificate needs both a certificate and its key (--cert and --key, \
             SEQCTL_CERT and SEQCTL_KEY, or cert and key in the profile)"
                .into(),
        ));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    const PROFILES: &str = r#"
[prod]
store = ["10.0.0.1:7111", "10.0.0.2:7111"]
store_admin = ["10.0.0.1:7121"]
alloc = ["10.0.0.5:7201"]
ca = "prod/ca.pem"
cert = "/etc/seqsvr/ops.pem"
key = "/etc/seqsvr/ops-key.pem"

[staging]
alloc = ["10.1.0.5:7201"]
"#;

    fn profiles() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profiles.toml");
        std::fs::write(&path, PROFILES).unwrap();
        let p = path.to_string_lossy().into_owned();
        (dir, p)
    }

    #[test]
    fn nothing_given_means_the_dev_cluster() {
        let s = resolve(Layer::default(), None, &env_of(&[])).unwrap();
        assert!(s.dev);
        assert_eq!(s.store.1, Origin::Dev);
        assert_eq!(s.store.0[0], "127.0.0.1:7111");
        assert_eq!(s.store_admin.0[2], "127.0.0.1:7123");
        assert_eq!(s.alloc.0, ["127.0.0.1:7201", "127.0.0.1:7202"]);
        assert_eq!((s.ca, s.port_base), (None, 7100));
        // The dev cluster on other ports, from the environment.
        let s = resolve(
            Layer::default(),
            None,
            &env_of(&[("SEQCTL_PORT_BASE", "17100")]),
        )
        .unwrap();
        assert!(s.dev);
        assert_eq!(s.store.0[0], "127.0.0.1:17111");
        assert_eq!(s.alloc.0[1], "127.0.0.1:17202");
    }

    #[test]
    fn flags_beat_the_environment_which_beats_the_profile() {
        let (_dir, path) = profiles();
        let env = env_of(&[
            (PROFILES_ENV, &path),
            (PROFILE_ENV, "prod"),
            ("SEQCTL_ALLOC", "10.9.0.1:7201, 10.9.0.2:7201"),
            ("SEQCTL_KEY", "/env/key.pem"),
        ]);
        let flags = Layer {
            store: Some(vec!["flag:1".into()]),
            key: Some("/flag/key.pem".into()),
            ..Layer::default()
        };
        let s = resolve(flags, None, &env).unwrap();
        assert!(!s.dev);
        assert_eq!(
            s.store,
            (vec!["flag:1".to_string()], Origin::Flag("--store"))
        );
        assert_eq!(
            s.alloc,
            (
                vec!["10.9.0.1:7201".to_string(), "10.9.0.2:7201".to_string()],
                Origin::Env("SEQCTL_ALLOC")
            )
        );
        assert_eq!(s.store_admin.1, Origin::Profile("prod".into()));
        assert_eq!(s.key, Some("/flag/key.pem".into()));
        assert_eq!(s.cert, Some("/etc/seqsvr/ops.pem".into()));
        // A relative path in the profile is taken from the file's directory.
        let dir = Path::new(&path).parent().unwrap();
        assert_eq!(s.ca, Some(dir.join("prod/ca.pem")));
        // --profile beats SEQCTL_PROFILE; staging has no certificate for
        // the environment's key.
        let e = resolve(Layer::default(), Some("staging".into()), &env);
        assert!(matches!(e, Err(SettingsError::Conflict(_))), "{e:?}");
        let env = env_of(&[(PROFILES_ENV, &path), (PROFILE_ENV, "prod")]);
        let s = resolve(Layer::default(), Some("staging".into()), &env).unwrap();
        assert_eq!(s.alloc.1, Origin::Profile("staging".into()));
        assert_eq!(s.store.1, Origin::Dev);
        assert_eq!(s.cert, None);
    }

    #[test]
    fn the_profile_file_is_found_in_the_usual_places() {
        let p = profiles_path(&env_of(&[("HOME", "/home/op")])).unwrap();
        assert_eq!(p, Path::new("/home/op/.config/seqctl/profiles.toml"));
        let p = profiles_path(&env_of(&[
            ("HOME", "/home/op"),
            ("XDG_CONFIG_HOME", "/cfg"),
        ]));
        assert_eq!(p.unwrap(), Path::new("/cfg/seqctl/profiles.toml"));
        let p = profiles_path(&env_of(&[
            ("XDG_CONFIG_HOME", "/cfg"),
            (PROFILES_ENV, "/x.toml"),
        ]));
        assert_eq!(p.unwrap(), Path::new("/x.toml"));
        assert_eq!(profiles_path(&env_of(&[])), None);
    }

    #[test]
    fn bad_settings_are_named_errors() {
        let (dir, path) = profiles();
        let env = env_of(&[(PROFILES_ENV, &path)]);
        let e = resolve(Layer::default(), Some("qa".into()), &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no profile \"qa\" in {path} (it has: prod, staging)")
        );
        let e = resolve(
            Layer::default(),
            None,
            &env_of(&[("SEQCTL_PORT_BASE", "x")]),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("SEQCTL_PORT_BASE=\"x\": "), "{e}");
        let missing = dir.path().join("none.toml").to_string_lossy().into_owned();
        let e = resolve(
            Layer::default(),
            Some("prod".into()),
            &env_of(&[(PROFILES_ENV, &missing)]),
        );
        assert!(matches!(e, Err(SettingsError::Unreadable { .. })), "{e:?}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[prod]\nstore = [\"a:1\"]\nstores = [\"b:2\"]\n").unwrap();
        let bad = bad.to_string_lossy().into_owned();
        let e = resolve(
            Layer::default(),
            Some("prod".into()),
            &env_of(&[(PROFILES_ENV, &bad)]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `stores`"), "{e}");
        assert!(e.to_string().contains("(line 3)"), "{e}");
        let half = Layer {
            cert: Some("c.pem".into()),
            ..Layer::default()
        };
        let e = resolve(half, None, &env_of(&[])).unwrap_err();
        assert!(matches!(e, SettingsError::Conflict(_)), "{e:?}");
        // The key from the environment completes the flag's certificate.
        let half = Layer {
            cert: Some("c.pem".into()),
            ..Layer::default()
        };
        assert!(resolve(half, None, &env_of(&[("SEQCTL_KEY", "k.pem")])).is_ok());
    }
}
