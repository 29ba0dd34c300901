//! The standalone daemon (`podsweep`): Kyuubi's configuration file plus overrides -> an engine in
//! self-watch mode, logs on stderr, `/healthz`, `/metrics` and `/status` over HTTP.
//!
//! # Guarantees
//! * Self-watch mode is forced on (`...cleanupTerminatedDriverPod.watch.enabled=true`); a bad
//!   configuration exits with status 2 and a message naming the key, before anything starts.
//! * Without an HA backend (`kyuubi.ha.addresses` / `kyuubi.ha.zookeeper.quorum`) the daemon
//!   exits with status 2 unless it runs alone (`--single-server`, or
//!   `...cleanupTerminatedDriverPod.ha.singleServer=true`): replicas would each lead every scope.
//! * On start, exactly one line goes to stdout: `podsweep listening on http://HOST:PORT` (the
//!   address actually bound, so `--listen 127.0.0.1:0` can be used).
//! * SIGTERM or SIGINT closes the engine (leadership released, nothing deleted) and exits 0.

pub mod check;
pub mod conf;
pub mod exposition;
pub mod http;
pub mod ops;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::config::Settings;
use crate::engine::{self, Engine};

/// Exit status of a bad configuration or command line.
pub const EXIT_CONFIG: u8 = 2;
/// Exit status of a failure to start (port taken, no signal handler).
pub const EXIT_START: u8 = 1;

/// How long `close` waits for the scopes to release leadership on shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Coordinated cleanup of terminated Spark driver pods for Apache Kyuubi, as a standalone
/// daemon: one cleanup leader per (context, namespace), elected through Kyuubi's HA backend,
/// watches the driver pods and deletes the terminated ones after the retain period.
#[derive(Debug, Parser)]
#[command(
    name = "podsweep",
    version,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// An operator's verb instead of the daemon (status, uninstall, check, copy-jars).
    #[command(subcommand)]
    pub command: Option<ops::Command>,
    /// Kyuubi's configuration file (kyuubi-defaults.conf).
    #[arg(long, value_name = "FILE", required_unless_present = "list_keys")]
    pub config: Option<PathBuf>,
    /// Prints podsweep's own configuration keys (json, markdown, or scala: the patch's
    /// KyuubiConf entries) and exits.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, default_missing_value = "json")]
    pub list_keys: Option<String>,
    /// Sets one key over the file's value; may be repeated.
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    pub conf: Vec<String>,
    /// This server's id in the elections [default: the host name].
    #[arg(long, value_name = "ID")]
    pub server_id: Option<String>,
    /// Address of the HTTP endpoints (/healthz, /livez, /metrics, /status).
    #[arg(long, value_name = "HOST:PORT", default_value = "0.0.0.0:10029")]
    pub listen: String,
    /// This daemon is the only one cleaning its Kubernetes contexts and namespaces: it may run
    /// without an HA backend (sets ...cleanupTerminatedDriverPod.ha.singleServer=true).
    #[arg(long)]
    pub single_server: bool,
    /// Log level when RUST_LOG is not set (error, warn, info, debug, trace).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log lines on stderr: text (one line per event) or json (one JSON object per line, for
    /// log pipelines).
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// The format of the daemon's log lines on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `tracing`'s text format: time, level, target, message and fields on one line.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's fields
    /// at the top level.
    Json,
}

/// Set once logging starts in JSON: a refused configuration is then one JSON object too.
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs the daemon until SIGTERM or SIGINT; returns the exit status.
pub fn run(mut args: Args) -> u8 {
    if let Some(command) = args.command.take() {
        return ops::run(command);
    }
    if let Some(format) = &args.list_keys {
        let text = match format.as_str() {
            "json" => crate::config::table::json() + "\n",
            "markdown" => crate::config::table::markdown(),
            "scala" => crate::config::table::scala(),
            other => {
                eprintln!("podsweep: --list-keys: expected json, markdown or scala, got {other:?}");
                return EXIT_CONFIG;
            }
        };
        print!("{text}");
        let _ = std::io::stdout().flush();
        return 0;
    }
    let Some(config) = args.config.clone() else {
        eprintln!("podsweep: --config is required");
        return EXIT_CONFIG;
    };
    if let Err(e) = init_logging(&args.log_level, args.log_format) {
        eprintln!("podsweep: --log-level: {e}");
        return EXIT_CONFIG;
    }
    let mut overrides = args.conf.clone();
    if args.single_server {
        overrides.push(format!("{}=true", crate::config::keys::HA_SINGLE_SERVER));
    }
    let settings = match check::daemon_settings(&config, &overrides) {
        Ok(s) => s,
        Err(e) => return config_error(&e),
    };
    let server_id = args.server_id.clone().unwrap_or_else(host_name);
    let rt = match engine::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            error!("podsweep cannot start: {e}");
            return EXIT_START;
        }
    };
    rt.block_on(serve(settings, server_id, args))
}

fn config_error(message: &str) -> u8 {
    let message = format!(
        "podsweep: bad configuration: {}",
        crate::config::redact::scrub(message)
    );
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        let line = serde_json::json!({
            "timestamp": crate::election::inspect::rfc3339(crate::metrics::epoch_ms() as i64),
            "level": "ERROR",
            "target": "podsweep",
            "message": message,
        });
        eprintln!("{line}");
    } else {
        eprintln!("{message}");
    }
    EXIT_CONFIG
}

/// stderr, with every secret of the configuration replaced ([`crate::config::redact::scrub`]).
struct ScrubbedStderr;

impl Write for ScrubbedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(crate::config::redact::scrub(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The host name: in a Deployment the pod's name (unique per replica), in a sidecar the Kyuubi
/// server's pod name, so the election says which pod leads.
fn host_name() -> String {
    let name = gethostname::gethostname()
        .to_string_lossy()
        .trim()
        .to_owned();
    if name.is_empty() {
        "podsweep".to_owned()
    } else {
        name
    }
}

/// Logs on stderr: `RUST_LOG` if set, else `level`, as text or JSON lines. kube-rs's own line
/// for every failed request is left out by default: podsweep logs each watch failure and sums up
/// failed DELETEs itself.
fn init_logging(level: &str, format: LogFormat) -> Result<(), String> {
    let filter = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => f,
        Err(_) => {
            level
                .parse::<tracing_subscriber::filter::LevelFilter>()
                .map_err(|_| {
                    format!("expected error, warn, info, debug or trace, got {level:?}")
                })?;
            tracing_subscriber::EnvFilter::builder()
                .parse(format!("{level},kube_client::client::builder=off"))
                .map_err(|e| e.to_string())?
        }
    };
    // A second initialisation (in-process tests) keeps the first subscriber.
    let builder = tracing_subscriber::fmt()
        .with_writer(|| ScrubbedStderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => {
            let _ = builder
                .with_ansi(std::io::stderr().is_terminal())
                .try_init();
        }
        LogFormat::Json => {
            JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .try_init();
        }
    }
    Ok(())
}

async fn serve(settings: Settings, server_id: String, args: Args) -> u8 {
    let listener = match TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            error!("Cannot listen on {}: {e}", args.listen);
            eprintln!("podsweep: cannot listen on {}: {e}", args.listen);
            return EXIT_START;
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("podsweep: cannot read the bound address: {e}");
            return EXIT_START;
        }
    };
    let (mut term, mut int) = match signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("podsweep: cannot handle signals: {e}");
            return EXIT_START;
        }
    };
    info!(
        "podsweep {} daemon, server id {server_id}, configuration {} with {} override(s)",
        env!("CARGO_PKG_VERSION"),
        args.config
            .as_deref()
            .unwrap_or(std::path::Path::new("-"))
            .display(),
        args.conf.len()
    );
    let engine = match Engine::new(settings, &server_id, tokio::runtime::Handle::current()) {
        Ok(e) => Arc::new(e),
        Err(e) => return config_error(&e.to_string()),
    };
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(http::serve(listener, engine.clone(), shutdown.clone()));
    tokio::spawn(status_lines(engine.clone(), shutdown.clone()));
    println!("podsweep listening on http://{addr}");
    let _ = std::io::stdout().flush();
    let signal = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!("{signal} received: closing (leadership is released, nothing is deleted)");
    shutdown.cancel();
    engine.close_async(CLOSE_TIMEOUT).await;
    let _ = server.await;
    info!("podsweep stopped");
    0
}

/// One INFO line per scope every `status.logInterval` (target `podsweep::status`), as the Java
/// API's status logger writes them into Kyuubi's log.
async fn status_lines(engine: Arc<Engine>, shutdown: CancellationToken) {
    let every = engine.settings().status_log_interval;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let all: serde_json::Value =
            serde_json::from_str(&engine.status_all_json()).unwrap_or_default();
        for v in all.as_array().into_iter().flatten() {
            info!(target: "podsweep::status", "{}", status_line(v));
        }
    }
}

/// A scope's status as one log line: the gist first, then the whole JSON.
pub fn status_line(v: &serde_json::Value) -> String {
    let text = |k: &str| v[k].as_str().unwrap_or("?").to_owned();
    let num = |k: &str| v[k].as_u64().unwrap_or(0);
    let health = if v["healthy"] == true {
        "healthy".to_owned()
    } else {
        format!("unhealthy ({})", text("health_reason"))
    };
    let pause = if v["paused"] == true {
        let until = match v["paused_until_ms"].as_i64() {
            Some(ms) => format!(" until {}", crate::election::inspect::rfc3339(ms)),
            None => String::new(),
        };
        format!("paused ({}){until}", text("pause_reason"))
    } else {
        "not paused".to_owned()
    };
    let failure = match v["last_failure"].as_object() {
        Some(f) => format!(
            "last failure {} at {}",
            f.get("outcome").and_then(|o| o.as_str()).unwrap_or("?"),
            crate::election::inspect::rfc3339(f.get("at_ms").and_then(|t| t.as_i64()).unwrap_or(0))
        ),
        None => "no failure".to_owned(),
    };
    format!(
        "Status of scope {} on {}: {} for {}s, {health}, {pause}, tracked {}, due {}, in flight {}, \
         retries {}, {failure}; status {v}",
        text("scope"),
        text("server_id"),
        text("leadership"),
        num("leadership_age_ms") / 1000,
        num("tracked"),
        num("due"),
        num("inflight"),
        num("retries"),
    )
}

fn signals() -> std::io::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}
