//! A worker pool reaching the daemon through a TLS-terminating proxy
//! (`https://`, docs/operations.md, Worker pools on other machines): with
//! the proxy's CA among its roots it runs the attempt; without it, it
//! refuses the proxy's certificate and claims nothing. A post that fails
//! while the proxy restarts is sent again and lands.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{AGENTS, Pool, create, file, mint};
use crate::daemon::{Swarmd, read_pid};
use crate::harness::PATIENCE;

/// Runs openssl in `dir`; panics with its stderr when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 it signed
/// (`leaf.pem`, `leaf.key`), in `dir`.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req", "-x509", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
    ];
    ca.extend(ec);
    ca.extend([
        "-subj",
        "/CN=swarmd test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec![
        "req",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=127.0.0.1",
    ];
    csr.extend(ec);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
        ],
    );
}

/// The fixture relay terminating TLS in front of `sw` (on `port`, else a
/// free one); its `https://` URL.
async fn relay(sw: &Swarmd, dir: &Path, port: Option<u16>) -> (Child, String) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tls-relay.py"
    );
    let target = sw.base.rsplit(':').next().unwrap().to_owned();
    let mut child = Command::new("python3")
        .arg(script)
        .arg(dir.join("leaf.pem"))
        .arg(dir.join("leaf.key"))
        .args(["127.0.0.1", &target])
        .args(port.map(|p| p.to_string()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the relay starts")
        .unwrap()
        .unwrap_or_default();
    let listening = first
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("relay said {first:?}"));
    (child, format!("https://127.0.0.1:{listening}"))
}

#[tokio::test]
async fn a_pool_reaches_the_daemon_through_tls_and_checks_its_certificate() {
    let sw = Swarmd::new(AGENTS).start().await;
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let (_relay, url) = relay(&sw, certs.path(), None).await;
    let token = mint(&sw, &["remote"]);

    // Without the proxy's CA among its roots, the pool refuses the
    // certificate: it claims nothing and says why.
    let system_roots = Path::new("/etc/ssl/certs/ca-certificates.crt");
    let untrusting = Pool::start_at(
        &sw,
        &url,
        &[("SSL_CERT_FILE", system_roots)],
        &token,
        "remote",
        "pool-untrusting",
        1,
    )
    .await;
    let waiting = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    let started = Instant::now();
    while !untrusting.log().contains("certificate") {
        assert!(
            started.elapsed() < PATIENCE,
            "no certificate error:\n{}",
            untrusting.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = sw.metrics().await;
    assert!(
        metrics.contains("swarmd_remote_attempts_claimed_total 0"),
        "{metrics}"
    );
    drop(untrusting);

    // With it, the pool claims over TLS and posts the attempt's outputs and
    // result through the proxy.
    let ca = certs.path().join("ca.pem");
    let pool = Pool::start_at(
        &sw,
        &url,
        &[("SSL_CERT_FILE", &ca)],
        &token,
        "remote",
        "pool-tls",
        1,
    )
    .await;
    let view = sw.finished(&waiting).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["pool"], "pool-tls");
    let stages: Vec<String> = sw
        .output(&waiting)
        .await
        .iter()
        .filter_map(|r| r["event"]["stage"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(stages, ["started"]);
}

#[tokio::test]
async fn a_final_posted_while_the_proxy_restarts_is_sent_again() {
    let sw = Swarmd::new(AGENTS).start().await;
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let (mut proxy, url) = relay(&sw, certs.path(), None).await;
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let token = mint(&sw, &["remote"]);
    let ca = certs.path().join("ca.pem");
    let pool = Pool::start_at(
        &sw,
        &url,
        &[("SSL_CERT_FILE", &ca)],
        &token,
        "remote",
        "pool-tls",
        1,
    )
    .await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "hold"})).await;
    read_pid(&file(&sw, &task, 1, "pid")).await;

    // The proxy goes away; the child ends and its Final cannot be posted.
    proxy.kill().await.unwrap();
    std::fs::write(file(&sw, &task, 1, "go"), "").unwrap();
    let started = Instant::now();
    while !pool.log().contains("posting failed; retrying") {
        assert!(started.elapsed() < PATIENCE, "no retry:\n{}", pool.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Back on the same port, the post that was sent again lands: attempt 1
    // passes, not a retry of it.
    let (_proxy, again) = relay(&sw, certs.path(), Some(port)).await;
    assert_eq!(again, url);
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["attempt"], 1, "{view}");
    assert_eq!(view["attempts"].as_array().map(Vec::len), Some(1), "{view}");
}
