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

#[test]
fn a_filter_over_a_large_value_is_charged_by_its_size() {
    // One `sort` of 200 000 items is one instruction: the loop would sort
    // it 100 000 times on fuel alone.
    let ctx = json!({"input": {"a": (0..200_000).rev().collect::<Vec<u32>>()}});
    let text = "{% for i in range(100000) %}{{ input.a|sort|length }}{% endfor %}";
    let error = render(text, &ctx).unwrap_err();
    assert!(error.contains("units of work"), "{error}");
    assert!(error.contains("`sort`"), "{error}");
    // Linear filters too: `sum` of the same list, in a loop.
    let error = render(
        "{% for i in range(100000) %}{{ input.a|sum }}{% endfor %}",
        &ctx,
    )
    .unwrap_err();
    assert!(error.contains("`sum`"), "{error}");
    // Once is within the work allowed.
    assert_eq!(render("{{ input.a|sort|first }}", &ctx).unwrap(), "0");
    assert_eq!(render("{{ input.a|sum }}", &ctx).unwrap(), "19999900000");
}

#[test]
fn fuel_shrinks_with_the_size_of_the_variables_a_template_names() {
    // `in` over 50 000 items is one instruction too: the fuel for a
    // template naming them is what keeps the loop short.
    let ctx = json!({"input": {"a": (0..50_000).collect::<Vec<u32>>()}, "small": [1, 2]});
    let error = render(
        "{% for i in range(100000) %}{% if -1 in input.a %}x{% endif %}{% endfor %}",
        &ctx,
    )
    .unwrap_err();
    assert!(error.contains("fuel"), "{error}");
    // A template that names only small variables keeps its whole fuel.
    let long = "{% for i in range(5000) %}{% if 3 in small %}x{% endif %}{% endfor %}";
    assert_eq!(render(long, &ctx).unwrap(), "");
    // And one naming the large one can still pick from it.
    assert_eq!(render("{{ input.a[49999] }}", &ctx).unwrap(), "49999");
}
