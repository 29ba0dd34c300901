//! `podsweep --config <kyuubi-defaults.conf> [--conf key=value]... [--server-id ID]
//! [--listen HOST:PORT]`: the standalone cleanup daemon (see `docs/daemon.md`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = podsweep::daemon::Args::parse();
    ExitCode::from(podsweep::daemon::run(args))
}
