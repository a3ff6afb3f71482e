//! Hostile clients: listings over huge tasks. A page of tasks ends at its
//! byte budget (16 MiB as stored) whatever its `limit`, and says where the
//! next begins; the agents' counts read no task bodies at all.

use serde_json::{Value, json};

use crate::harness::{Daemon, parts};

/// Prompts of 6 MiB: the third fills a 16 MiB page.
const PROMPT_BYTES: usize = 6 << 20;
const TASKS: usize = 5;

#[tokio::test]
async fn a_listing_over_huge_prompts_is_paged_by_bytes() {
    let daemon = Daemon::start().await;
    let prompt = "p".repeat(PROMPT_BYTES);
    let mut made = Vec::new();
    for _ in 0..TASKS {
        made.push(
            daemon
                .spawn(json!({"agent": "hold", "prompt": prompt}))
                .await,
        );
    }
    made.reverse();

    // `limit=1000` asked; the pages follow `next` until it is absent.
    let mut pages: Vec<Vec<String>> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = after
            .as_ref()
            .map_or(String::new(), |id| format!("&after={id}"));
        let response = daemon
            .get(&format!("/v1/tasks?limit=1000{query}"), &daemon.admin)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let bytes = response.bytes().await.unwrap();
        assert!(
            bytes.len() < (16 << 20) + PROMPT_BYTES + (64 << 10),
            "a page of {} bytes",
            bytes.len()
        );
        let page: Value = serde_json::from_slice(&bytes).unwrap();
        let ids: Vec<String> = page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| task["id"].as_str().unwrap().to_owned())
            .collect();
        pages.push(ids);
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
        assert!(pages.len() <= TASKS, "pages never end: {pages:?}");
    }
    assert_eq!(pages, vec![made[..3].to_vec(), made[3..].to_vec()]);

    // The agents' counts see all five, running or queued.
    let (status, agents) = parts(
        daemon
            .get("/v1/agents", &daemon.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{agents}");
    let hold = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|agent| agent["name"] == "hold")
        .unwrap();
    let live = hold["running"].as_u64().unwrap() + hold["queued"].as_u64().unwrap();
    assert_eq!(live, TASKS as u64, "{hold}");
    for task in &made {
        daemon.release(task);
    }
}
