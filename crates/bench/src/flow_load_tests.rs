//! The `flows` workload's expectations and its table.

use std::collections::BTreeMap;

use super::*;

fn measured(shape: Shape, mode: Mode, runs_per_sec: f64, p50_ms: u64, cpu: f64) -> Measured {
    Measured {
        shape,
        mode,
        in_flight: 32,
        summary: Summary {
            completed: 1000,
            window_secs: 1000.0 / runs_per_sec,
            tasks_per_sec: runs_per_sec,
            p50: Some(Duration::from_millis(p50_ms)),
            p90: Some(Duration::from_millis(p50_ms * 2)),
            p99: Some(Duration::from_millis(p50_ms * 4)),
            max: Some(Duration::from_millis(p50_ms * 8)),
            overhead_p50: None,
            overhead_p99: None,
            send_lag_p99: None,
            errors: BTreeMap::new(),
            frames_per_task: None,
        },
        usage: Usage {
            server_cpu: Some(cpu),
            children_cpu: None,
            generator_cpu: Some(0.1),
            server_hwm_kib: None,
            load: Some(2.0),
        },
    }
}

#[test]
fn the_expected_results_are_what_the_steps_pass_on() {
    assert_eq!(expected_result(Shape::Seq3), json!("bench"));
    assert_eq!(
        expected_result(Shape::Fan5),
        json!("bench 0;bench 1;bench 2;bench 3;bench 4;")
    );
    assert_eq!(fan_join(&["x".to_owned(), "y".to_owned()]), "x;y;");
}

#[test]
fn a_task_answer_gives_its_results_value() {
    let answer = json!({"status": "pass", "result": {"ok": true, "value": "bench"}});
    assert_eq!(task_value(&answer), json!("bench"));
    assert_eq!(task_value(&json!({"status": "pass"})), Value::Null);
}

#[test]
fn the_table_puts_flow_against_plain_per_shape() {
    let rows = [
        measured(Shape::Seq3, Mode::Flow, 400.0, 80, 2.0),
        measured(Shape::Seq3, Mode::Plain, 500.0, 64, 1.6),
        measured(Shape::Fan5, Mode::Flow, 200.0, 150, 4.0),
        measured(Shape::Fan5, Mode::Plain, 200.0, 150, 5.0),
    ];
    let table = markdown(&rows, "sqlite (full)");
    assert!(
        table.contains("| seq3 | flow | 32 | 1000 | 400 | 80.00 | 160.00 | 320.00 | 640.00 | 0 | 2.000 | 0.100 | 2.00 |"),
        "{table}"
    );
    // Time per run is the inverse of runs/s: 500 / 400.
    assert!(
        table.contains("| seq3 | 1.25 | 1.25 | 1.25 | 1.25 |"),
        "{table}"
    );
    assert!(
        table.contains("| fan5 | 1.00 | 1.00 | 1.00 | 0.80 |"),
        "{table}"
    );
}

#[test]
fn a_ratio_needs_both_sides_and_a_divisor() {
    assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
    assert_eq!(ratio(None, Some(2.0)), None);
    assert_eq!(ratio(Some(1.0), Some(0.0)), None);
}
