//! The setup command: its lines become `setup` notes, a non-zero exit and
//! the timeout fail it with the attempt's reason, its environment is exactly
//! the one given.

use std::time::Duration;

use super::*;

fn setup(script: &str, timeout_secs: u64) -> SetupSpec {
    SetupSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        timeout: Duration::from_secs(timeout_secs),
    }
}

fn env() -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("SWARM_PORT".into(), "20001".into()),
    ]
}

/// Runs `spec` in a temporary directory; returns how it ended and its notes.
async fn ran(spec: &SetupSpec) -> (Result<(), SetupError>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (sender, mut received) = mpsc::channel(8192);
    let ended = run(spec, dir.path(), &env(), sender).await;
    let mut notes = Vec::new();
    while let Ok(event) = received.try_recv() {
        match event {
            OutputEvent::Progress { stage, note } if stage == SETUP => {
                notes.push(note.unwrap_or_default());
            }
            other => panic!("not a setup note: {other:?}"),
        }
    }
    (ended, notes)
}

#[tokio::test]
async fn its_lines_become_setup_notes_between_the_command_and_how_it_ended() {
    let (ended, notes) = ran(&setup(
        "echo installing; echo warned >&2; echo port $SWARM_PORT; echo home=$HOME",
        30,
    ))
    .await;
    assert_eq!(ended, Ok(()));
    assert_eq!(
        notes.first().unwrap(),
        "running sh -c echo installing; echo warned >&2; echo port $SWARM_PORT; echo home=$HOME"
    );
    for line in ["installing", "warned", "port 20001", "home="] {
        assert!(notes.iter().any(|n| n == line), "{line} not in {notes:?}");
    }
    assert!(notes.last().unwrap().starts_with("done in "), "{notes:?}");
}

#[tokio::test]
async fn a_non_zero_exit_fails_with_its_code() {
    let (ended, notes) = ran(&setup("echo broken; exit 3", 30)).await;
    assert_eq!(ended, Err(SetupError::Exit(3)));
    assert_eq!(ended.unwrap_err().to_string(), "setup failed: exit 3");
    assert!(notes.iter().any(|n| n == "broken"), "{notes:?}");
    assert_eq!(notes.last().unwrap(), "setup failed: exit 3");
}

#[tokio::test]
async fn a_program_not_found_fails_to_start() {
    let spec = SetupSpec {
        command: vec!["no-such-setup-program".into()],
        timeout: Duration::from_secs(5),
    };
    let (ended, _) = ran(&spec).await;
    assert!(
        matches!(&ended, Err(SetupError::Start { program, .. }) if program == "no-such-setup-program"),
        "{ended:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_past_its_timeout_is_killed_and_fails() {
    let started = std::time::Instant::now();
    let (ended, notes) = ran(&setup("echo waiting; sleep 600", 300)).await;
    assert_eq!(ended, Err(SetupError::TimedOut(Duration::from_secs(300))));
    assert_eq!(
        notes.last().unwrap(),
        "setup timed out after 300 s",
        "{notes:?}"
    );
    // The paused clock jumped to the timeout: no real wait.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test]
async fn more_lines_than_kept_are_counted() {
    let (ended, notes) = ran(&setup("seq 1 2100", 30)).await;
    assert_eq!(ended, Ok(()));
    assert!(
        notes.iter().any(|n| n == "100 more lines not recorded"),
        "{:?}",
        &notes[notes.len() - 3..]
    );
}
