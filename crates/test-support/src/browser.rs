//! Headless Chromium (Debian's `chromium`) driven over the DevTools protocol through
//! `--remote-debugging-pipe`: JSON messages separated by NUL bytes on the browser's fds 3 (in)
//! and 4 (out). A pipe needs no port, no websocket client and no driver binary; `sh` maps the
//! fds (`3<&0 4>&1`) so that no unsafe `pre_exec` is needed either.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::app::TempDir;

/// One browser process (in its own process group, killed by PID) and one page in it.
pub struct Browser {
    child: Child,
    pgid: Pid,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
    session: String,
    /// Exceptions the page's script threw (`Runtime.exceptionThrown`), as text.
    pub exceptions: Vec<String>,
    /// Set once the process is known to be gone: its group id may then belong to others.
    gone: bool,
    _profile: TempDir,
}

/// Each protocol call is answered within this, even on a loaded 2-core machine.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

impl Browser {
    /// Starts Chromium with a throw-away profile and opens one blank page of `width`×`height`.
    pub async fn launch(width: u32, height: u32) -> Browser {
        let profile = TempDir::new("chromium");
        let script = r#"exec chromium --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
            --no-first-run --no-default-browser-check --disable-extensions --disable-sync \
            --disable-background-networking --disable-component-update --mute-audio \
            --user-data-dir="$1" --remote-debugging-pipe about:blank \
            3<&0 4>&1 </dev/null >/dev/null 2>>"$1/chromium.log""#;
        let mut child = Command::new("sh")
            .args(["-c", script, "browser"])
            .arg(&profile.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("sh");
        let pgid = Pid::from_raw(child.id().expect("pid") as i32);
        let to = child.stdin.take().expect("stdin");
        let from = BufReader::new(child.stdout.take().expect("stdout"));
        let mut b = Browser {
            child,
            pgid,
            to,
            from,
            next_id: 0,
            session: String::new(),
            exceptions: Vec::new(),
            gone: false,
            _profile: profile,
        };
        let version = b.call_in(None, "Browser.getVersion", json!({})).await;
        let version = match version {
            Ok(v) => v,
            Err(e) => panic!(
                "chromium did not answer ({e}); install Debian's chromium (`apt-get install -y chromium`; \
                 {}); its log:\n{}",
                crate::SET_UP,
                std::fs::read_to_string(b._profile.0.join("chromium.log")).unwrap_or_default()
            ),
        };
        eprintln!("browser: {}", version["product"]);
        let target = b
            .call_in(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await
            .expect("a page");
        let attached = b
            .call_in(
                None,
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await
            .expect("attached");
        b.session = attached["sessionId"].as_str().expect("session").to_string();
        b.call("Runtime.enable", json!({})).await;
        b.call("Page.enable", json!({})).await;
        b.resize(width, height).await;
        b
    }

    pub async fn resize(&mut self, width: u32, height: u32) {
        let mobile = width < 600;
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        )
        .await;
    }

    /// A protocol call on the page; panics on a protocol error.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        match self.call_in(Some(&session), method, params).await {
            Ok(v) => v,
            Err(e) => panic!("{method}: {e}"),
        }
    }

    async fn call_in(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("json");
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .await
            .map_err(|e| format!("write: {e}"))?;
        self.to.flush().await.map_err(|e| format!("flush: {e}"))?;
        let deadline = pilot_election::clock::now() + CALL_TIMEOUT;
        loop {
            let mut raw = Vec::new();
            let read = tokio::time::timeout_at(deadline, self.from.read_until(0, &mut raw)).await;
            match read {
                Err(_) => return Err(format!("no answer within {CALL_TIMEOUT:?}")),
                Ok(Err(e)) => return Err(format!("read: {e}")),
                Ok(Ok(0)) => return Err("the browser closed the pipe".into()),
                Ok(Ok(_)) => {}
            }
            if raw.last() == Some(&0) {
                raw.pop();
            }
            let m: Value = serde_json::from_slice(&raw).map_err(|e| format!("bad JSON: {e}"))?;
            if m["method"] == "Runtime.exceptionThrown" {
                self.exceptions
                    .push(m["params"]["exceptionDetails"].to_string());
            }
            if m["id"] == json!(id) {
                return match m.get("error") {
                    Some(err) => Err(err.to_string()),
                    None => Ok(m["result"].clone()),
                };
            }
        }
    }

    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub async fn eval(&mut self, expr: &str) -> Value {
        match self.try_eval(expr).await {
            Ok(v) => v,
            Err(e) => panic!("`{expr}`: {e}"),
        }
    }

    /// As [`Browser::eval`], but an error (the page is between two documents, say) is returned.
    async fn try_eval(&mut self, expr: &str) -> Result<Value, String> {
        let session = self.session.clone();
        let params = json!({"expression": expr, "returnByValue": true, "awaitPromise": true});
        let r = self
            .call_in(Some(&session), "Runtime.evaluate", params)
            .await?;
        match r.get("exceptionDetails") {
            Some(ex) => Err(format!("threw {ex}")),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// Evaluates `expr` until it is truthy, returning that value; panics with the last value
    /// (and `what`) when `within` passes.
    pub async fn wait_for(&mut self, what: &str, expr: &str, within: Duration) -> Value {
        let deadline = pilot_election::clock::now() + within;
        loop {
            let v = self.try_eval(expr).await.unwrap_or(Value::Null);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return v;
            }
            if pilot_election::clock::now() >= deadline {
                let page = self
                    .try_eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("the page never showed {what} within {within:?}; it shows:\n{page:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Types into the focused element as a user would.
    pub async fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// A PNG of the whole page, written to `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("data"))
            .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).expect("write the screenshot");
    }

    /// Closes the browser: politely, then by its process group.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.call_in(None, "Browser.close", json!({})),
        )
        .await;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            let _ = self.child.wait().await;
        }
        self.gone = true;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Renderers and helpers share the browser's process group.
        if !self.gone {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
    }
}
