//! `kubectl bundle approve` racing with a tag that moves: the approver reviewed digest A, the
//! tag moves to B while the plugin waits for the confirmation, and B must stay unapproved and
//! unapplied. The race is driven step by step, not by timing: the plugin runs on a terminal
//! (`script` gives it a pseudo-terminal), so it reads the bundle, shows digest A and stops at
//! its question; the tag moves and the controller records B; only then is the question
//! answered.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use gantry_api::conditions::{reasons, types};
use gantry_api::{ApprovalDecision, Bundle};
use gantry_tests::e2e::kubectl::*;
use gantry_tests::e2e::*;
use kube::api::Api;

/// Quotes a word for `sh -c`.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `kubectl bundle ARGS` on a pseudo-terminal (through util-linux `script`), with its output
/// collected as it comes and its input held open until the test answers.
struct OnTerminal {
    child: Child,
    stdin: Option<ChildStdin>,
    output: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl OnTerminal {
    fn start(args: &[&str]) -> Self {
        let inner = kubectl_bundle_command(args);
        let mut line = shell_quote(&inner.get_program().to_string_lossy());
        for arg in inner.get_args() {
            line.push(' ');
            line.push_str(&shell_quote(&arg.to_string_lossy()));
        }
        let mut command = Command::new("script");
        // -q: no banner, -e: its exit status is the command's, -f: flush output at once.
        command.args(["-q", "-e", "-f", "-c", &line, "/dev/null"]);
        for (key, value) in inner.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting kubectl bundle under script");
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for mut stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let output = output.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    output.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }));
        }
        OnTerminal {
            stdin: child.stdin.take(),
            child,
            output,
            readers,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `wanted`.
    fn wait_for(&mut self, wanted: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.text().contains(wanted) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "kubectl bundle exited ({status}) before printing {wanted:?}:\n{}",
                    self.text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {wanted:?} within {WAIT:?}; printed:\n{}",
                self.text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Types `answer` and a newline, then waits for the command to end; its success and output.
    fn answer(mut self, answer: &str) -> (bool, String) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl bundle still running {WAIT:?} after the answer:\n{}",
                self.text()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        drop(stdin);
        // The readers end once the process has closed its output: wait for its last lines.
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let text = self.text();
        (status.success(), text)
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn approving_while_the_tag_moves_never_approves_the_new_digest() {
    let client = shared_gantry_client().await;
    let bundles: Api<Bundle> = Api::all(client.clone());
    let UnderReview {
        name,
        namespace: ns,
        repository: repo,
        pinned: first,
        ..
    } = config_map_under_review(&client, "race").await;
    let (a, kc) = (digest_of(&first).to_string(), kubeconfig());

    // The approver runs approve: the plugin reads the bundle, shows A and asks.
    let mut approver = OnTerminal::start(&["approve", &name, "--kubeconfig", &kc]);
    approver.wait_for(&format!("Approve {a}? [y/N]"));

    // Meanwhile the tag moves to B and the controller records it.
    let second = push_config_map(&repo, "cm", None, "v2").await;
    let b = digest_of(&second).to_string();
    wait_bundle(
        &client,
        &name,
        "the new digest awaiting approval",
        |bundle| {
            bundle
                .status
                .as_ref()
                .and_then(|s| s.resolved_image.as_deref())
                == Some(second.as_str())
                && condition(bundle, types::APPROVED).is_some_and(|c| {
                    c.reason == reasons::AWAITING_APPROVAL && c.message.contains(&b)
                })
        },
    )
    .await;

    // The approver confirms what they reviewed: the plugin refuses to write it onto B.
    let (approved, output) = approver.answer("y");
    assert!(
        !approved,
        "approve succeeded after the tag moved:\n{output}"
    );
    assert!(
        output.contains("changed while it was shown"),
        "the refusal says why:\n{output}"
    );
    let bundle = bundles.get(&name).await.unwrap();
    let status = bundle.status.clone().unwrap_or_default();
    assert!(
        status.approval.is_none(),
        "no decision was recorded: {:?}",
        status.approval
    );
    assert_eq!(status.resolved_image.as_deref(), Some(second.as_str()));
    let approved_condition = condition(&bundle, types::APPROVED).unwrap();
    assert_eq!(approved_condition.status, "False");
    assert_eq!(approved_condition.reason, reasons::AWAITING_APPROVAL);
    assert_eq!(
        config_map_data(&client, &ns, "cm").await,
        None,
        "nothing applied"
    );

    // Pinning the reviewed digest after the move is refused too, naming the new one.
    let pinned_to_a = fails(&["approve", &name, "--yes", "--digest", &a]);
    assert!(pinned_to_a.contains(&b), "{pinned_to_a}");
    assert!(
        bundles
            .get(&name)
            .await
            .unwrap()
            .status
            .and_then(|s| s.approval)
            .is_none()
    );

    // An approval of A written anyway (as a plugin that skipped both checks would) does not
    // carry over to B: the controller keeps waiting and applies nothing.
    let stale = serde_json::json!({
        "apiVersion": "gantry.dev/v1alpha1",
        "kind": "Bundle",
        "metadata": { "name": name },
        "status": { "approval": { "decision": "Approved", "digest": a } },
    });
    bundles
        .patch_status(
            &name,
            &kube::api::PatchParams::apply("race-test").force(),
            &kube::api::Patch::Apply(&stale),
        )
        .await
        .expect("writing an approval of the old digest");
    wait_bundle(
        &client,
        &name,
        "the old approval seen and not carried over",
        |bundle| {
            condition(bundle, types::APPROVED).is_some_and(|c| {
                c.reason == reasons::AWAITING_APPROVAL && c.message.contains("does not carry over")
            })
        },
    )
    .await;
    assert_eq!(
        config_map_data(&client, &ns, "cm").await,
        None,
        "B is not applied"
    );

    // Reviewing B and approving it installs B.
    let mut approver = OnTerminal::start(&["approve", &name, "--kubeconfig", &kc]);
    approver.wait_for(&format!("Approve {b}? [y/N]"));
    let (approved, output) = approver.answer("y");
    assert!(approved, "{output}");
    let bundle = wait_bundle(&client, &name, "Ready", is_ready).await;
    let approval = bundle.status.unwrap().approval.unwrap();
    assert_eq!(
        (approval.decision, approval.digest.as_str()),
        (ApprovalDecision::Approved, b.as_str())
    );
    assert_config_map(&client, &ns, "cm", Some("v2")).await;
}
