//! Spawns the real `aleph` binary and talks HTTP to it.
#![allow(dead_code)]

pub mod media;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The real all-MiniLM-L6-v2 folder (`scripts/fetch-models.sh` puts it there).
pub fn minilm_dir() -> PathBuf {
    let dir = std::env::var("ALEPH_TEST_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("models/all-MiniLM-L6-v2"));
    assert!(dir.join("model.safetensors").exists(), "{} is missing: run scripts/fetch-models.sh", dir.display());
    dir
}

/// A tiny seeded fixture under tests/fixtures/tiny (scripts/make_*.py), as a `--model-id`.
pub fn tiny(name: &str) -> String {
    repo_root().join("tests/fixtures/tiny").join(name).to_string_lossy().into_owned()
}

pub fn minilm() -> String {
    minilm_dir().to_string_lossy().into_owned()
}

pub struct Server {
    child: Child,
    pub base: String,
    logs: Arc<Mutex<String>>,
}

pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Asserts an OpenAI-envelope error with this status.
    pub fn assert_error(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.body);
        let v = self.json();
        let err = &v["error"];
        assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()), "no message: {v}");
        assert_eq!(err["code"], status, "{v}");
        assert!(err.get("type").is_some() && err.get("param").is_some(), "{v}");
        v
    }
}

impl Server {
    /// Starts `aleph v2 --host 127.0.0.1 --port 0 <args>` and waits until it serves.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        match Self::try_start(args, env) {
            Ok(s) => s,
            Err(logs) => panic!("aleph did not start:\n{logs}"),
        }
    }

    /// Like `start`, but returns the process's output if it exits or never serves.
    pub fn try_start(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_aleph"));
        cmd.arg("v2").args(["--host", "127.0.0.1", "--port", "0"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env_remove("RUST_LOG").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn aleph");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push_str(&format!("{line}\n"));
                    if let Some(rest) = line.split("on http://").nth(1) {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_string());
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut base: Option<String> = None;
        loop {
            if let Ok(addr) = rx.recv_timeout(Duration::from_millis(20)) {
                base = Some(format!("http://{addr}"));
            }
            // The port opens before the models load; ready means /health answers 200.
            if let Some(b) = &base {
                if ureq::get(&format!("{b}/health")).timeout(Duration::from_secs(5)).call().is_ok() {
                    return Ok(Server { child, base: b.clone(), logs });
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                return Err(format!("exit {status}\n{}", logs.lock().unwrap()));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!("timed out\n{}", logs.lock().unwrap()));
            }
        }
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Reply {
        let agent = ureq::AgentBuilder::new().redirects(0).timeout(Duration::from_secs(120)).build();
        let mut req = agent.request(method, &format!("{}{}", self.base, path));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let result = match body {
            Some(b) => req.send_string(b),
            None => req.call(),
        };
        let resp = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}\n{}", self.logs()),
        };
        let status = resp.status();
        let headers = resp
            .headers_names()
            .into_iter()
            .map(|n| {
                let v = resp.header(&n).unwrap_or_default().to_string();
                (n, v)
            })
            .collect();
        let body = resp.into_string().unwrap_or_default();
        Reply { status, body, headers }
    }

    pub fn post(&self, path: &str, body: &str) -> Reply {
        self.request("POST", path, Some(body), &[("Content-Type", "application/json")])
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post(path, &body.to_string())
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, None, &[])
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

/// Serves `app` on a loopback port from a background thread; returns its base URL.
pub fn serve_router(app: axum::Router) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}
