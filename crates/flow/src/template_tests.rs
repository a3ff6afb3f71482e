//! Tests of the templates' subset and bounds.

use serde_json::json;

use super::{MAX_RENDERED_BYTES, check, render};

#[test]
fn what_flows_write_is_allowed_and_renders() {
    let ctx = json!({
        "input": {"task": "fix auth", "tags": ["a", "b"]},
        "scores": [{"attempt": 1, "ok": true}, {"attempt": 2, "ok": false}],
        "approval": {"pick": 1},
    });
    for (text, want) in [
        ("{{ input.task }} (try {{ 3 }})", "fix auth (try 3)"),
        (
            "{% for s in scores if s.ok %}[{{ loop.index0 }}] {{ s.attempt }}{% endfor %}",
            "[0] 1",
        ),
        ("{{ input.tags|join(', ')|upper }}", "A, B"),
        ("{{ scores[approval.pick].attempt }}", "2"),
        (
            "{% if input.tags|length > 1 %}many{% else %}one{% endif %}",
            "many",
        ),
        ("{{ missing|default('none') }}", "none"),
        ("{% for i in range(3) %}{{ i }}{% endfor %}", "012"),
        ("{{ 7 - 2 }} {{ 7 // 2 }} {{ 7 % 2 }}", "5 3 1"),
        (
            "{% if 4 is divisibleby(2) and not (1 > 2) %}y{% endif %}",
            "y",
        ),
        (
            "{% for s in scores %}{{ loop.cycle('a', 'b') }}{% endfor %}",
            "ab",
        ),
        ("{% raw %}{{ kept }}{% endraw %}", "{{ kept }}"),
    ] {
        assert_eq!(check(text), Ok(()), "{text}");
        assert_eq!(render(text, &ctx).unwrap(), want, "{text}");
    }
}

#[test]
fn what_can_build_values_without_a_bound_is_refused_before_it_runs() {
    for (text, says) in [
        ("{{ input ~ input }}", "`~`"),
        ("{{ 'x' * 100000000 }}", "`*`"),
        ("{{ a + a }}", "`+`"),
        ("{{ 2 ** 64 }}", "`**`"),
        ("{% set s = 'x' %}{{ s }}", "`{% set %}`"),
        ("{% set s %}x{% endset %}", "`{% set %}`"),
        ("{% macro m() %}x{% endmacro %}", "`{% macro %}`"),
        ("{% filter upper %}x{% endfilter %}", "`{% filter %}`"),
        ("{% include 'x' %}", "`{% include %}`"),
        ("{{ x|replace('a', x) }}", "the filter `replace`"),
        ("{{ x|e|e }}", "the filter `e`"),
        ("{{ x|list }}", "the filter `list`"),
        ("{{ namespace(a=1) }}", "the function `namespace`"),
        (
            "{% for t in tree recursive %}{{ loop(t.c) }}{% endfor %}",
            "recursive",
        ),
    ] {
        let error = check(text).unwrap_err();
        assert!(error.contains(says), "{text}: {error}");
        // Rendering checks again: a template stored before the check ran
        // is refused too.
        assert_eq!(render(text, &json!({})).unwrap_err(), error, "{text}");
    }
}

#[test]
fn output_and_join_stop_at_the_bound() {
    let big = "x".repeat(100_000);
    let ctx = json!({"big": big, "many": vec![big.clone(); 10]});
    let error = render("{% for i in range(10) %}{{ big }}{% endfor %}", &ctx).unwrap_err();
    assert!(error.contains("more than"), "{error}");
    let error = render("{{ many|join(big) }}", &ctx).unwrap_err();
    assert!(error.contains("more than"), "{error}");
    // Exactly at the bound is answered whole.
    let exact = json!({"s": "y".repeat(MAX_RENDERED_BYTES)});
    assert_eq!(render("{{ s }}", &exact).unwrap().len(), MAX_RENDERED_BYTES);
}

#[test]
fn fuel_still_stops_a_long_loop() {
    let error = render(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        &json!({}),
    )
    .unwrap_err();
    assert!(error.contains("fuel"), "{error}");
}
