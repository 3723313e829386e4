//! Starts moto server (the local AWS) from the project's Python venv and builds SDK
//! configuration that points at it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use tokio::process::{Child, Command};

/// Why moto could not start.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// No moto_server executable.
    #[error(
        "moto_server not found (looked for $TERN_MOTO_SERVER, then .venv/bin/python with tools/moto_server.py in {searched}). \
         Run `make venv` to create the project's Python venv with moto, or set TERN_MOTO_SERVER"
    )]
    NotFound {
        /// Where it looked.
        searched: String,
    },
    /// The process did not start.
    #[error("moto_server at {path} did not start: {source}")]
    Spawn {
        /// Executable.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The server did not answer in time.
    #[error("moto_server did not answer on {url} within {seconds} s")]
    NotReady {
        /// Its URL.
        url: String,
        /// How long it was given.
        seconds: u64,
    },
    /// A free port could not be found.
    #[error("no free local port: {0}")]
    Port(std::io::Error),
    /// Enabling Step Functions execution failed.
    #[error("cannot configure moto: {0}")]
    Config(String),
}

/// A running moto server on 127.0.0.1. Killed when dropped.
pub struct MotoServer {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its port.
    pub port: u16,
}

/// How to start moto: a program and the arguments before `-H`/`-p`.
#[derive(Debug, Clone)]
pub struct MotoCommand {
    /// Executable.
    pub program: PathBuf,
    /// Leading arguments.
    pub args: Vec<String>,
}

/// Finds moto: `$TERN_MOTO_SERVER` (a `moto_server` executable), else the venv's Python
/// running the repo's `tools/moto_server.py` (stock moto plus fixes, see that file),
/// looking for `.venv` in the current directory and its parents.
///
/// # Errors
/// [`MotoError::NotFound`] naming where it looked.
pub fn find_moto_server() -> Result<MotoCommand, MotoError> {
    if let Ok(p) = std::env::var("TERN_MOTO_SERVER") {
        return Ok(MotoCommand {
            program: PathBuf::from(p),
            args: vec![],
        });
    }
    let start = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut searched = Vec::new();
    let mut dir: Option<&Path> = Some(&start);
    while let Some(d) = dir {
        let python = d.join(".venv/bin/python");
        let launcher = d.join("tools/moto_server.py");
        if python.is_file() && launcher.is_file() && d.join(".venv/bin/moto_server").is_file() {
            return Ok(MotoCommand {
                program: python,
                args: vec![launcher.display().to_string()],
            });
        }
        searched.push(d.display().to_string());
        dir = d.parent();
    }
    Err(MotoError::NotFound {
        searched: searched.join(", "),
    })
}

fn free_port() -> Result<u16, MotoError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(MotoError::Port)?;
    Ok(l.local_addr().map_err(MotoError::Port)?.port())
}

impl MotoServer {
    /// Starts moto on a free port, waits until it answers, and turns on Step Functions
    /// execution (off by default in moto; must be on before any state machine is created).
    ///
    /// # Errors
    /// [`MotoError`] with what to do about it.
    pub async fn start() -> Result<Self, MotoError> {
        Self::start_with_env(&[]).await
    }

    /// Like [`Self::start`], with extra environment variables for the server, for example
    /// `TERN_MOTO_STOCK=<fix>` to leave one of `tools/moto_server.py`'s fixes out and
    /// compare with stock moto.
    ///
    /// # Errors
    /// [`MotoError`] with what to do about it.
    pub async fn start_with_env(vars: &[(&str, &str)]) -> Result<Self, MotoError> {
        let moto = find_moto_server()?;
        let port = free_port()?;
        // TERN_MOTO_LOG=<file> keeps moto's own log (tracebacks of its 500s) for debugging.
        let log = std::env::var("TERN_MOTO_LOG")
            .ok()
            .and_then(|p| std::fs::File::create(p).ok())
            .map_or_else(Stdio::null, Stdio::from);
        let mut command = Command::new(&moto.program);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent. It makes
        // the kernel kill moto when the process that started it dies, even by a signal
        // that skips destructors.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .args(&moto.args)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // Step Functions service tasks call back into moto at localhost:$MOTO_PORT.
            .env("MOTO_PORT", port.to_string())
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| MotoError::Spawn {
                path: moto.program.display().to_string(),
                source,
            })?;
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
        };
        server.wait_ready(Duration::from_secs(30)).await?;
        server.enable_step_functions().await?;
        Ok(server)
    }

    async fn wait_ready(&self, limit: Duration) -> Result<(), MotoError> {
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/moto-api/", self.url)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(MotoError::NotReady {
            url: self.url.clone(),
            seconds: limit.as_secs(),
        })
    }

    async fn enable_step_functions(&self) -> Result<(), MotoError> {
        let r = reqwest::Client::new()
            .post(format!("{}/moto-api/config", self.url))
            .header("content-type", "application/json")
            .body(r#"{"stepfunctions":{"execute_state_machine":true}}"#)
            .send()
            .await
            .map_err(|e| MotoError::Config(e.to_string()))?;
        if !r.status().is_success() {
            return Err(MotoError::Config(format!("status {}", r.status())));
        }
        Ok(())
    }

    /// SDK configuration for this server.
    pub async fn sdk_config(&self) -> SdkConfig {
        sdk_config_for(&self.url).await
    }

    /// Stops the server.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// SDK configuration for a local endpoint: fixed test credentials and `us-east-1`.
pub async fn sdk_config_for(url: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "tern-local",
        ))
        .load()
        .await
}
