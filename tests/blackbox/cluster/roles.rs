//! Role names across nodes: logins of one role name sent to two nodes at the same instant are
//! judged one after the other, so exactly one of them holds it.

use serde_json::{Value, json};

use super::{Cluster, QUICK};
use crate::daemon::Swarmd;
use crate::harness::parts;

/// Pairs of simultaneous logins, one role name each.
const PAIRS: usize = 6;

async fn login(node: &Swarmd, role: &str) -> (u16, Value) {
    let request = node
        .post("/v1/operators", &node.admin)
        .json(&json!({"roles": [role]}));
    parts(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_simultaneous_logins_of_a_role_on_two_nodes_holds_it() {
    let cluster = Cluster::start(2, QUICK).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    for pair in 0..PAIRS {
        let role = format!("role-{pair}");
        let ((on_a, body_a), (on_b, body_b)) = tokio::join!(login(a, &role), login(b, &role));
        let mut statuses = [on_a, on_b];
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [201, 409],
            "{role}: A answered {on_a} {}, B {on_b} {}",
            body_a["code"],
            body_b["code"]
        );
        let refused = if on_a == 409 { &body_a } else { &body_b };
        assert_eq!(refused["code"], "role_taken", "{refused}");
    }
    // The database holds one session per role name.
    let held = cluster
        .db
        .query_i32(
            "SELECT count(*)::int FROM sessions s, jsonb_array_elements_text((s.body::jsonb) -> 'roles') r
             WHERE r LIKE 'role-%'",
        )
        .await;
    assert_eq!(held, [PAIRS as i32]);
}
