//! The `tollgate` binary: parse the command line, set up logging, run.

use clap::Parser;
use tollgate::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    tollgate::heap::limit_arenas();
    let cli = Cli::parse();
    match &cli.command {
        Command::Serve(args) => tollgate::cli::set_compute_threads(args.threads),
        Command::Perplexity { threads, .. } => tollgate::cli::set_compute_threads(*threads),
        _ => {}
    }
    tollgate::cli::init_logging(cli.log_format);
    match cli.command {
        Command::Models { models, weights } => {
            print!("{}", tollgate::app::print_models(&models, &weights)?);
            Ok(())
        }
        Command::Mcp {
            stdio: _,
            models,
            weights,
            tokenizers,
            data_dir,
        } => {
            let data_dir = tollgate::app::data_dir(data_dir.as_deref(), &cli.db);
            let tokenizers = tokenizers.unwrap_or_else(|| data_dir.join("tokenizers"));
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(tollgate::app::serve_mcp_stdio(
                &models,
                &weights,
                &tokenizers,
                &data_dir,
            ))
        }
        Command::Serve(args) => {
            let cfg = args.config(&cli.db)?;
            let state = tollgate::app::build_state(&cfg)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(tollgate::app::serve_until_signal(state, cfg.bind))
        }
        other => {
            print!("{}", tollgate::cli::run_operator(other, &cli.db)?);
            Ok(())
        }
    }
}
