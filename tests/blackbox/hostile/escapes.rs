//! Hostile clients: a worker whose progress note, partial output and Final
//! carry terminal escapes (ANSI CSI, an OSC 8 hyperlink, a C1 CSI) and bidi
//! overrides (U+202E) and isolates. In a real browser, the dashboard's task
//! page shows each of them as a visible marker (`␛`, `⟨U+202E⟩`) and none
//! reaches the page's text as it is.

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::ui::Browser;

/// `hostile` prints, as NDJSON, a progress note, a partial chunk and a
/// Final, each disguised with escapes and bidi controls (JSON `\u` escapes,
/// so the script itself is plain ASCII).
const AGENTS: &str = r#"
[agents.hostile]
kind = "process"
program = "/bin/sh"
args = ["-c", '''
cat <<'EOF'
{"type":"progress","stage":"evil","note":"note \u202eexe.txt\u202c \u001b[31mred\u001b[0m"}
{"type":"partial","chunk":{"kind":"inline","value":"partial \u2066\u202egnp.exe\u2069 \u001b]8;;http://evil.example/\u0007click\u001b]8;;\u0007 \u009b2J"}}
{"type":"final","content":{"kind":"inline","value":"final \u202eRTL\u202c \u001b[2J"},"ok":true}
EOF
''']
stdin = "none"
stream = "ndjson"
env = { PATH = "/usr/bin:/bin" }
"#;

/// The characters that must never reach the page's text as they are.
const RAW: [char; 7] = [
    '\u{202e}', '\u{202c}', '\u{2066}', '\u{2069}', '\u{1b}', '\u{7}', '\u{9b}',
];

#[tokio::test]
async fn escapes_and_bidi_overrides_from_a_worker_are_shown_as_markers() {
    let sw = Swarmd::new(AGENTS).start().await;
    let task = sw
        .create_as(&sw.admin, json!({"agent": "hostile", "prompt": "go"}))
        .await;
    assert_eq!(sw.finished(&task).await["status"], "pass");

    let browser = Browser::start().await;
    browser.client.goto(&sw.url("/ui")).await.unwrap();
    browser.sign_in(&sw.admin).await;
    browser.show(&format!("#/task/{task}")).await;
    browser
        .until(
            "the task's note, partial and Final",
            "const o = document.getElementById('output'); \
             return o && o.querySelector('.final-value') && o.querySelector('.partial').textContent \
               && o.querySelector('.progress li')",
        )
        .await;

    let texts = browser
        .js("const o = document.getElementById('output'); \
             return { note: o.querySelector('.progress li').textContent, \
                      partial: o.querySelector('.partial').textContent, \
                      final: o.querySelector('.final-value').textContent, \
                      page: document.body.textContent, \
                      markers: o.querySelectorAll('span.ctl').length }")
        .await;
    let text = |key: &str| texts[key].as_str().unwrap_or_default().to_owned();
    let page = text("page");
    for raw in RAW {
        assert!(
            !page.contains(raw),
            "U+{:04X} reached the page as it is: {texts:#}",
            u32::from(raw)
        );
    }
    assert_eq!(
        text("note"),
        "evil note ⟨U+202E⟩exe.txt⟨U+202C⟩ ␛[31mred␛[0m",
        "{texts:#}"
    );
    assert_eq!(
        text("partial"),
        "partial ⟨U+2066⟩⟨U+202E⟩gnp.exe⟨U+2069⟩ ␛]8;;http://evil.example/␇click␛]8;;␇ ⟨U+009B⟩2J",
        "{texts:#}"
    );
    assert_eq!(text("final"), "final ⟨U+202E⟩RTL⟨U+202C⟩ ␛[2J", "{texts:#}");
    // Each marker is an element of its own, told apart from text a worker
    // might write that looks the same.
    assert_eq!(texts["markers"], Value::from(15), "{texts:#}");
    // The OSC 8 hyperlink made no link.
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#output a').length")
            .await,
        json!(0)
    );
}
