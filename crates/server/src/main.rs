//! `aleph`: parse the command line, set up logging, then serve, evaluate or benchmark.

use aleph_server::cli::Action;
use aleph_server::{bench, cli, corpus, eval, startup};

fn main() -> std::process::ExitCode {
    // Before any thread exists: INFINITY_* settings become ALEPH_* defaults.
    cli::adopt_infinity_env();
    let action = cli::Cli::parse_action();
    let result =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(|rt| {
            match action {
                Action::Serve(args) => {
                    init_logging(&args.log_level);
                    rt.block_on(startup::run(*args))
                }
                Action::Eval(args) => {
                    // The tables go to stdout; the log (model loads) to stderr, quieter unless asked.
                    init_logging(if args.models.log_level == "info" { "warning" } else { &args.models.log_level });
                    rt.block_on(eval::run(*args))
                }
                Action::Bench(args) => {
                    init_logging(if args.models.log_level == "info" { "warning" } else { &args.models.log_level });
                    rt.block_on(bench::run(*args))
                }
                Action::Embed(args) => {
                    init_logging(if args.models.log_level == "info" { "warning" } else { &args.models.log_level });
                    rt.block_on(corpus::run(*args))
                }
            }
        });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str) {
    // Infinity's level names, mapped to tracing's.
    let level = match level.to_ascii_lowercase().as_str() {
        "critical" | "error" => "error",
        "warning" | "warn" => "warn",
        "debug" => "debug",
        "trace" => "trace",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},ort=warn,hyper=warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}
