//! Command line (clap): `tollgate serve`, `tollgate models`, and the operator commands
//! (`accounts`, `keys`, `credit`, `codes`, `ledger check`) that work on the ledger file.

pub mod http;
mod serve;
pub use http::parse_bytes;
pub use serve::{usd_to_micros, ServeArgs};

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tollgate",
    version,
    about = "OpenAI-compatible chat completions on open-weight models, with a prepaid ledger"
)]
pub struct Cli {
    /// The ledger (every command that touches money or keys): a SQLite file, or a
    /// `postgres://user[:password]@host[:port]/db` URL for replicas sharing one PostgreSQL.
    #[arg(
        long,
        env = "TOLLGATE_DB",
        default_value = "data/tollgate.db",
        global = true
    )]
    pub db: PathBuf,
    /// Log lines as `text` (coloured only when stderr is a terminal and `NO_COLOR` is unset)
    /// or `json` (one object per line, for log collectors). Logs go to stderr.
    #[arg(
        long,
        env = "TOLLGATE_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        global = true
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only on a terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, spans).
    Json,
}

/// Install the process's log subscriber: level from `RUST_LOG` (default `info`), lines to
/// stderr (stdout carries `mcp --stdio`'s protocol and the operator commands' output).
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => {
            // A log redirected to a file or a journal must not carry escape codes.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            builder.with_ansi(colour).init();
        }
    }
}

#[derive(Debug, Subcommand)]
// Parsed once at start-up; boxing the serve arguments would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the HTTP server.
    Serve(ServeArgs),
    /// Print the catalogue: id, maker, licence flag, prices, whether weights are present.
    Models {
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
    },
    /// Serve the MCP server (catalogue, prices, language costs, API reference) over stdin and
    /// stdout, for assistants that launch a process. Runs no model.
    Mcp {
        /// Serve over stdin/stdout (the only transport here; HTTP is `/mcp` of `serve`).
        #[arg(long, required = true)]
        stdio: bool,
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
        /// Reference tokenizers (`<name>/tokenizer.json`); default `<data dir>/tokenizers`.
        #[arg(long, env = "TOLLGATE_TOKENIZERS")]
        tokenizers: Option<PathBuf>,
        /// Files read besides weights (language costs, reference tokenizers); default: the
        /// directory of `--db`.
        #[arg(long, env = "TOLLGATE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Measure per-language token multipliers with each model's own tokenizer and write them.
    MeasureLanguages {
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
        /// One `<language code>.txt` per language (`eng.txt` required).
        #[arg(long, default_value = "data/udhr")]
        corpus: PathBuf,
        /// Reference tokenizers: `<name>/tokenizer.json` (scripts/ops/fetch-tokenizers); default
        /// `<data dir>/tokenizers`.
        #[arg(long)]
        tokenizers: Option<PathBuf>,
        /// Where to write; default `<data dir>/language-multipliers.json`, where `serve` reads.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The data directory `serve` reads (default: the directory of `--db`).
        #[arg(long, env = "TOLLGATE_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Perplexity of a model on a text file, computed as llama.cpp's `llama-perplexity` does
    /// (same chunking and scoring), to compare the two on one GGUF file, context and text.
    Perplexity {
        /// A catalogue id whose weights are a local GGUF file, or a path to a `.gguf` file.
        #[arg(long)]
        model: String,
        /// The UTF-8 text to score.
        #[arg(long, default_value = "data/udhr/eng.txt")]
        file: PathBuf,
        /// Tokens per chunk (llama-perplexity's `-c`); the second half of each is scored.
        #[arg(long, default_value_t = 512)]
        ctx: usize,
        /// Score at most this many chunks (llama-perplexity's `--chunks`); default all.
        #[arg(long)]
        chunks: Option<usize>,
        /// How the KV cache stores keys and values: f16 (as `serve`'s default) or f32.
        #[arg(long, default_value = "f16")]
        kv_cache_type: crate::engine::KvType,
        /// Compute threads. Default: all cores.
        #[arg(long, env = "TOLLGATE_THREADS")]
        threads: Option<usize>,
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
    },
    /// Compare a model's logits and greedy tokens on a device with the CPU's fast path, on
    /// the same GGUF file (three packed prompts, chunked prefill, greedy decoding), and both
    /// with an f32 reference: a GPU's first check. `--device cpu` runs the candle kernel path,
    /// the one CUDA takes, on the CPU. Prints JSON; exits non-zero when out of tolerance.
    CheckDevice {
        /// A catalogue id whose weights are a local GGUF file, or a path to a `.gguf` file.
        #[arg(long)]
        model: String,
        /// `cuda` (device 0) or `cpu`.
        #[arg(long, default_value = "cuda")]
        device: String,
        /// Greedy tokens decoded per prompt.
        #[arg(long, default_value_t = 16)]
        decode: usize,
        /// Skip the f32 reference (the weights dequantized on the CPU: 4 bytes a weight).
        #[arg(long)]
        no_reference: bool,
        #[arg(long, env = "TOLLGATE_MODELS", default_value = "models.toml")]
        models: PathBuf,
        #[arg(long, env = "TOLLGATE_WEIGHTS", default_value = "weights")]
        weights: PathBuf,
    },
    /// Accounts (operator commands for self-hosters).
    Accounts {
        #[command(subcommand)]
        command: AccountsCommand,
    },
    /// API keys: create (printed once), list, revoke.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Add money to an account (a `topup` ledger entry; negative amounts need `--adjustment`).
    Credit {
        /// Account id or e-mail.
        #[arg(long)]
        account: String,
        /// Amount in USD, e.g. 5 or 0.25 (at most 6 decimals).
        #[arg(long, allow_hyphen_values = true)]
        usd: String,
        #[arg(long, default_value = "operator credit")]
        note: String,
        /// Record as an adjustment (may be negative) instead of a top-up.
        #[arg(long)]
        adjustment: bool,
    },
    /// Redeemable codes (stored hashed, single use).
    Codes {
        #[command(subcommand)]
        command: CodesCommand,
    },
    /// Ledger maintenance.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AccountsCommand {
    /// Create an account with the starter balance.
    Create {
        #[arg(long)]
        email: String,
        /// Starter balance in USD.
        #[arg(long, env = "TOLLGATE_STARTER_BALANCE_USD", default_value = "0.10")]
        starter_balance_usd: String,
    },
    /// Balance, holds and recent usage of an account.
    Show {
        /// Account id or e-mail.
        #[arg(long)]
        account: String,
    },
    /// Grant or take the dashboard's admin role (list accounts, adjust balances).
    SetRole {
        /// Account id or e-mail.
        #[arg(long)]
        account: String,
        #[arg(long, value_parser = ["admin", "user"])]
        role: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it once.
    Create {
        /// Account id or e-mail.
        #[arg(long)]
        account: String,
        #[arg(long, default_value = "default")]
        name: String,
        /// The most the key may spend in its life, in USD (requests past it get 402
        /// `KEY_SPEND_LIMIT`); default: only the balance limits it.
        #[arg(long)]
        spend_limit_usd: Option<String>,
        /// Days until the key expires (401 `expired_api_key` after); default: never.
        #[arg(long)]
        expires_in_days: Option<u32>,
    },
    /// List an account's keys (prefix, name, created, last used, state, limit, expiry).
    List {
        #[arg(long)]
        account: String,
    },
    /// Revoke a key by id; running servers stop accepting it within a second.
    Revoke {
        #[arg(long)]
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum CodesCommand {
    /// Create redeemable codes worth `--usd` each and print them.
    Create {
        #[arg(long)]
        usd: String,
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Verify the ledger's invariants; exits non-zero with the offending rows.
    Check,
}

/// Set the compute thread count: rayon's pool (our kernels, attention, the fused activation and
/// candle's f32 matmuls) gets `threads` (default: the available cores). Candle's own barrier
/// pool, which it runs its elementwise ops on, gets none (`CANDLE_NUM_THREADS=1`: those ops run
/// on the calling rayon worker): its workers spin for a while after every op, so beside rayon's
/// they oversubscribe the cores (on a 2-core machine 1.08x in aggregate decode at 16 streams
/// without them). Must run before any other thread exists (both pools are sized once, from the
/// environment).
pub fn set_compute_threads(threads: Option<usize>) {
    let n = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
        .max(1);
    // SAFETY-free in edition 2021: called from `main` before the runtime or any thread starts.
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}

/// Open the ledger at `db`, naming the file in the error.
fn open(db: &std::path::Path) -> anyhow::Result<crate::ledger::Ledger> {
    crate::ledger::Ledger::open(db)
        .map_err(|e| anyhow::anyhow!("failed to open `{}`: {e}", db.display()))
}

/// The `keys` commands: create (with an optional spend limit and expiry), list, revoke. Output
/// goes to `out`; the full new key is its only line, the rest goes to stderr.
fn keys_command(
    command: KeysCommand,
    db: &std::path::Path,
    out: &mut String,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    match command {
        KeysCommand::Create {
            account,
            name,
            spend_limit_usd,
            expires_in_days,
        } => {
            let l = open(db)?;
            let a = l.find_account(&account)?;
            let limit = spend_limit_usd.as_deref().map(usd_to_micros).transpose()?;
            // Checked before the key exists, so a refused limit leaves no key behind.
            if limit.is_some_and(|m| m < crate::money::Micros::ZERO) {
                anyhow::bail!("--spend-limit-usd must not be negative");
            }
            let (key, mut rec) = crate::auth::create_key(&l, a.id, &name)?;
            if limit.is_some() || expires_in_days.is_some() {
                let update = crate::ledger::KeyUpdate {
                    spend_limit_micros: Some(limit),
                    expires_at: Some(
                        expires_in_days.map(|d| crate::ledger::now() + i64::from(d) * 86_400),
                    ),
                    ..Default::default()
                };
                rec = l.update_key(rec.id, &update)?;
            }
            writeln!(out, "{key}")?;
            eprintln!(
                "key {} ({}) for account {}: shown once, store it now",
                rec.id, rec.prefix, a.id
            );
        }
        KeysCommand::List { account } => {
            let l = open(db)?;
            let a = l.find_account(&account)?;
            for k in l.keys(a.id)? {
                writeln!(
                    out,
                    "{:>5} {}… {:<20} created {} last used {} {:?} limit {} expires {}",
                    k.id,
                    k.prefix,
                    k.name,
                    k.created_at,
                    k.last_used_at
                        .map_or_else(|| "never".to_owned(), |t| t.to_string()),
                    k.state,
                    k.spend_limit_micros
                        .map_or_else(|| "none".to_owned(), |m| m.to_string()),
                    k.expires_at
                        .map_or_else(|| "never".to_owned(), |t| t.to_string()),
                )?;
            }
        }
        KeysCommand::Revoke { id } => {
            let k = open(db)?.revoke_key(crate::ledger::KeyId(id))?;
            writeln!(out, "revoked key {} ({}…)", k.id, k.prefix)?;
        }
    }
    Ok(())
}

/// Run an operator command against the ledger; returns what to print.
///
/// # Errors
/// Ledger errors and bad arguments; `ledger check` fails when an invariant is broken.
pub fn run_operator(command: Command, db: &std::path::Path) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let mut out = String::new();
    match command {
        Command::Accounts { command } => accounts_command(command, db, &mut out)?,
        Command::Keys { command } => keys_command(command, db, &mut out)?,
        Command::Credit {
            account,
            usd: amount,
            note,
            adjustment,
        } => {
            let l = open(db)?;
            let a = l.find_account(&account)?;
            let a = l.credit(
                a.id,
                if adjustment { "adjustment" } else { "topup" },
                usd_to_micros(&amount)?,
                &note,
            )?;
            writeln!(out, "account {} balance {}", a.id, a.balance_micros)?;
        }
        Command::Codes {
            command: CodesCommand::Create { usd: amount, count },
        } => {
            let l = open(db)?;
            let micros = usd_to_micros(&amount)?;
            for _ in 0..count {
                let code = format!("TG-{}", &crate::auth::generate_key()[7..31].to_uppercase());
                l.insert_code(&code, micros)?;
                writeln!(out, "{code}")?;
            }
        }
        Command::Ledger {
            command: LedgerCommand::Check,
        } => ledger_check(db, &mut out)?,
        Command::MeasureLanguages {
            models,
            weights,
            corpus,
            tokenizers,
            out: out_path,
            data_dir,
        } => {
            let data_dir = crate::app::data_dir(data_dir.as_deref(), db);
            let tokenizers = tokenizers.unwrap_or_else(|| data_dir.join("tokenizers"));
            let out_path = out_path.unwrap_or_else(|| data_dir.join(crate::app::LANGUAGES_FILE));
            measure_languages(&models, &weights, &corpus, &tokenizers, &out_path, &mut out)?;
        }
        Command::Perplexity {
            model,
            file,
            ctx,
            chunks,
            kv_cache_type,
            models,
            weights,
            threads: _,
        } => {
            let path = crate::engine::perplexity_model_file(&model, &models, &weights)?;
            let r = crate::engine::measure_perplexity(
                &path,
                &file,
                ctx,
                chunks,
                kv_cache_type,
                |c, p| eprintln!("[{c}] running PPL {p:.4}"),
            )?;
            let isa = crate::engine::Isa::detect();
            let kv = kv_cache_type.name();
            writeln!(out, "{} isa={isa:?} ctx={ctx} kv={kv}: {r}", path.display())?;
        }
        Command::CheckDevice {
            model,
            device,
            decode,
            no_reference,
            models,
            weights,
        } => {
            use crate::engine::{compare_kernel_paths, KernelPath};
            let path = crate::engine::perplexity_model_file(&model, &models, &weights)?;
            let device = crate::app::candle_device(&device)?;
            let (candle, reference) = (KernelPath::Candle, !no_reference);
            let r = compare_kernel_paths(&path, &device, candle, decode, reference)?;
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
            anyhow::ensure!(
                r.within_tolerance,
                "{out}{}: the device's logits are out of tolerance (module doc of \
                 engine::model::device_check)",
                r.file
            );
        }
        Command::Serve(_) | Command::Models { .. } | Command::Mcp { .. } => {
            anyhow::bail!("not an operator command")
        }
    }
    Ok(out)
}

/// The `accounts` commands: create (with a starter balance), set a role, show a balance and
/// the latest usage. Output goes to `out`.
fn accounts_command(
    command: AccountsCommand,
    db: &std::path::Path,
    out: &mut String,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    match command {
        AccountsCommand::Create {
            email,
            starter_balance_usd,
        } => {
            let a = open(db)?.create_account(&email, usd_to_micros(&starter_balance_usd)?)?;
            writeln!(
                *out,
                "account {} <{}> balance {}",
                a.id, a.email, a.balance_micros
            )?;
        }
        AccountsCommand::SetRole { account, role } => {
            let l = open(db)?;
            let a = l.find_account(&account)?;
            let a = l.set_admin(a.id, role == "admin")?;
            writeln!(*out, "account {} <{}> is now {role}", a.id, a.email)?;
        }
        AccountsCommand::Show { account } => {
            let l = open(db)?;
            let a = l.find_account(&account)?;
            writeln!(
                *out,
                "account {} <{}>\nbalance {} ({} micros)\nreserved {} ({} micros)\navailable {}",
                a.id,
                a.email,
                a.balance_micros,
                a.balance_micros.0,
                a.reserved_micros,
                a.reserved_micros.0,
                a.available_micros()
            )?;
            for u in l.recent_usage(a.id, 10)? {
                writeln!(
                    *out,
                    "  {} {} prompt {} completion {} cost {} micros {:?}",
                    u.request_id,
                    u.model,
                    u.prompt_tokens,
                    u.completion_tokens,
                    u.cost_micros.0,
                    u.status
                )?;
            }
        }
    }
    Ok(())
}

/// `ledger check`: the ledger's invariants; an error naming every violation.
fn ledger_check(db: &std::path::Path, out: &mut String) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let violations = open(db)?.check()?;
    if !violations.is_empty() {
        for v in &violations {
            writeln!(*out, "VIOLATION {}: {}", v.invariant, v.detail)?;
        }
        anyhow::bail!(
            "{out}ledger check failed: {} violation(s)",
            violations.len()
        );
    }
    writeln!(*out, "ledger check: ok")?;
    Ok(())
}

/// `measure-languages`: each catalogue model's token multipliers per language over `corpus`,
/// written as JSON to `out_path`; a summary line goes to `out`.
fn measure_languages(
    models: &std::path::Path,
    weights: &std::path::Path,
    corpus: &std::path::Path,
    tokenizers: &std::path::Path,
    out_path: &std::path::Path,
    out: &mut String,
) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let catalog = crate::catalog::Catalog::load(models).map_err(anyhow::Error::msg)?;
    let texts = crate::engine::read_corpus(corpus)?;
    let measured = crate::engine::measure_languages(&catalog, weights, &texts, tokenizers);
    let with = measured.values().filter(|m| m.languages.is_some()).count();
    let doc = serde_json::json!({
        "corpus": {
            "name": "Universal Declaration of Human Rights",
            "provenance": format!("{}/README.md", corpus.display()),
            "languages": texts.keys().collect::<Vec<_>>(),
        },
        "rule": "multiplier = tokens(language) / tokens(eng) for the same passages; tokens counted without special tokens",
        "models": measured,
    });
    std::fs::write(out_path, serde_json::to_string_pretty(&doc)? + "\n")?;
    writeln!(
        *out,
        "measured {with} of {} models over {} languages -> {}",
        catalog.models.len(),
        texts.len(),
        out_path.display()
    )?;
    Ok(())
}
