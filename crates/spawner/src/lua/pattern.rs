//! The cost bound of Lua pattern matching: `string.find`, `match`, `gmatch`
//! and `gsub` backtrack, and one such call is a single C call the instruction
//! hook never interrupts, so a call that could run for too long is refused
//! before it starts (docs/configuration.md, "Lua patterns").
//!
//! A pattern's *backtracking items* are its single-character classes
//! followed by `*`, `+`, `-` or `?`, and its `%b`, `%f` and `%1`–`%9` items.
//! Each one may try every position of what is left of the subject for each
//! choice made before it, so a match costs up to about
//! `C(n + k, k) · m` steps for a subject of `n` bytes, `m` pattern items and
//! `k` counted items, where `k` leaves out a quantified item that ends the
//! pattern (nothing after it can fail, so it never backtracks) and adds one
//! for a pattern tried at every position (not anchored with `^`, and every
//! `gmatch` pattern). A call is refused when the pattern has more than
//! [`MAX_ITEMS`] backtracking items, or when that cost exceeds
//! [`MAX_STEPS`]. A plain `find` (`plain = true`, or a pattern with no
//! special characters) compares at most `n · length` bytes with `memcmp`
//! and is refused past [`MAX_PLAIN_BYTES`].

/// Most backtracking items a pattern may have, whatever the subject.
pub(super) const MAX_ITEMS: usize = 8;
/// Most match steps a call may cost in the worst case.
pub(super) const MAX_STEPS: f64 = 2e8;
/// Most bytes a plain `find` may compare in the worst case.
pub(super) const MAX_PLAIN_BYTES: f64 = 2e10;

/// Which of the pattern functions is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Find,
    Match,
    Gmatch,
    Gsub,
}

impl Kind {
    pub(super) fn parse(name: &str) -> Option<Kind> {
        match name {
            "find" => Some(Kind::Find),
            "match" => Some(Kind::Match),
            "gmatch" => Some(Kind::Gmatch),
            "gsub" => Some(Kind::Gsub),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Find => "string.find",
            Kind::Match => "string.match",
            Kind::Gmatch => "string.gmatch",
            Kind::Gsub => "string.gsub",
        }
    }
}

/// What the cost of a pattern depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    /// Backtracking items (`q`).
    pub(super) backtracking: usize,
    /// Items of any kind (`m`), at least one.
    pub(super) items: usize,
    /// Whether the last item is a quantified single-character class.
    pub(super) ends_quantified: bool,
    /// Whether the pattern starts with `^` (an anchor for all but `gmatch`).
    pub(super) caret: bool,
    /// Whether the pattern has any of Lua's special characters.
    pub(super) special: bool,
}

/// One item of a pattern, as far as its cost goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// A single-character class (`x`, `.`, `%a`, `[set]`), with its
    /// quantifier if it has one; `any` for `.`.
    Class { any: bool, quantifier: Option<u8> },
    /// `%b`, `%f` or a back-reference.
    Backtracking,
}

impl Item {
    fn backtracks(self) -> bool {
        !matches!(
            self,
            Item::Class {
                quantifier: None,
                ..
            }
        )
    }

    /// Whether it matches the empty string wherever it is tried.
    fn optional(self) -> bool {
        matches!(
            self,
            Item::Class {
                quantifier: Some(b'*' | b'-' | b'?'),
                ..
            }
        )
    }

    /// `.-` or `.*`: it can reach the subject's end from anywhere.
    fn reaches_the_end(self) -> bool {
        matches!(
            self,
            Item::Class {
                any: true,
                quantifier: Some(b'*' | b'-'),
            }
        )
    }
}

/// The items of `pattern` (captures left out) and whether it ends with the
/// `$` anchor. A malformed pattern is scanned as far as it goes; Lua itself
/// then refuses it.
fn items(pattern: &[u8]) -> (Vec<Item>, bool) {
    let mut i = usize::from(pattern.first() == Some(&b'^'));
    let mut found = Vec::new();
    let mut dollar = false;
    while i < pattern.len() {
        let any = pattern[i] == b'.';
        match pattern[i] {
            b'(' | b')' => {
                i += 1;
                continue;
            }
            b'$' if i + 1 == pattern.len() => {
                dollar = true;
                i += 1;
                continue;
            }
            b'%' if i + 1 < pattern.len() => match pattern[i + 1] {
                b'b' => {
                    i += 4;
                    found.push(Item::Backtracking);
                    continue;
                }
                b'f' => {
                    i = class_end(pattern, i + 2);
                    found.push(Item::Backtracking);
                    continue;
                }
                b'0'..=b'9' => {
                    i += 2;
                    found.push(Item::Backtracking);
                    continue;
                }
                _ => i += 2,
            },
            b'[' => i = class_end(pattern, i),
            _ => i += 1,
        }
        let quantifier = pattern
            .get(i)
            .copied()
            .filter(|b| matches!(b, b'*' | b'+' | b'-' | b'?'));
        if quantifier.is_some() {
            i += 1;
        }
        found.push(Item::Class { any, quantifier });
    }
    (found, dollar)
}

/// The shape of `pattern`.
pub(super) fn shape(pattern: &[u8]) -> Shape {
    let (found, dollar) = items(pattern);
    let mut shape = shape_of(&found, dollar);
    shape.caret = pattern.first() == Some(&b'^');
    shape.special = pattern.iter().any(|b| b"^$*+?.([%-".contains(b));
    shape
}

/// The shape of a run of items (unanchored, without special characters
/// noted); `dollar` when a `$` anchor follows them.
fn shape_of(found: &[Item], dollar: bool) -> Shape {
    Shape {
        backtracking: found.iter().filter(|item| item.backtracks()).count(),
        items: (found.len() + usize::from(dollar)).max(1),
        ends_quantified: !dollar
            && matches!(
                found.last(),
                Some(Item::Class {
                    quantifier: Some(_),
                    ..
                })
            ),
        caret: false,
        special: false,
    }
}

/// The index just past the set `[...]` starting at `start` (as Lua's
/// `classEnd` reads it: a `]` right after `[` or `[^` belongs to the set).
fn class_end(pattern: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    if pattern.get(i) == Some(&b'^') {
        i += 1;
    }
    loop {
        let Some(&b) = pattern.get(i) else {
            return pattern.len();
        };
        i += if b == b'%' { 2 } else { 1 };
        if pattern.get(i) == Some(&b']') {
            return i + 1;
        }
    }
}

/// A call of `kind` on a subject of `subject_len` bytes from `init` (Lua's
/// 1-based, negative from the end). `plain` is `find`'s fourth argument.
/// `Err` carries the message the script gets.
pub(super) fn check(
    kind: Kind,
    subject_len: usize,
    pattern: &[u8],
    init: Option<i64>,
    plain: bool,
) -> Result<(), String> {
    let n = remaining(subject_len, init);
    let shape = shape(pattern);
    if kind == Kind::Find && (plain || !shape.special) {
        let cost = n as f64 * pattern.len() as f64;
        if cost > MAX_PLAIN_BYTES {
            return Err(format!(
                "{}: a plain search for {} bytes in {n} bytes could compare {cost:.1e} bytes, \
                 more than {MAX_PLAIN_BYTES:.0e}; refused",
                kind.name(),
                pattern.len(),
            ));
        }
        return Ok(());
    }
    if shape.backtracking > MAX_ITEMS {
        return Err(format!(
            "{}: the pattern has {} backtracking items (quantified classes, %b, %f, \
             back-references); at most {MAX_ITEMS} are allowed",
            kind.name(),
            shape.backtracking,
        ));
    }
    let (cost, k, m) = worst(kind, pattern, &shape, n);
    if cost > MAX_STEPS {
        return Err(format!(
            "{}: the pattern could backtrack for too long on {n} bytes \
             ({k} counted backtracking items allow at most {} bytes); refused",
            kind.name(),
            longest(k, m),
        ));
    }
    Ok(())
}

/// The worst-case steps of a call on `n` bytes, with the `k` and `m` of
/// the part of the pattern that weighs most.
///
/// A pattern whose tail is `.-` or `.*` followed only by items that match
/// the empty string (`*`, `-`, `?`) and perhaps `$` always matches once it
/// is reached: the tail can stretch to the subject's end, where the rest
/// matches nothing. So what comes before the tail never backtracks on its
/// account, and a call that stops at its first match (`find`, `match`, an
/// anchored `gsub`) costs at most the head as a pattern of its own plus
/// the tail tried once: `^%s*(.-)%s*$` weighs as `k = 2`, not 3.
fn worst(kind: Kind, pattern: &[u8], shape: &Shape, n: usize) -> (f64, u32, usize) {
    let k = exponent(kind, shape);
    let mut best = (steps(n, k, shape.items), k, shape.items);
    let first_match_only = match kind {
        Kind::Find | Kind::Match => true,
        Kind::Gsub => shape.caret,
        Kind::Gmatch => false,
    };
    if !first_match_only {
        return best;
    }
    let (found, dollar) = items(pattern);
    for j in 0..found.len() {
        if !found[j].reaches_the_end() || !found[j + 1..].iter().all(|item| item.optional()) {
            continue;
        }
        let head = Shape {
            caret: shape.caret,
            ..shape_of(&found[..j], false)
        };
        let head_k = exponent(kind, &head);
        let tail = shape_of(&found[j..], dollar);
        // Tried once, at wherever the head ends.
        let tail_k = (tail.backtracking - usize::from(tail.ends_quantified)) as u32;
        let cost = steps(n, head_k, head.items) + steps(n, tail_k, tail.items);
        if cost < best.0 {
            best = if head_k >= tail_k {
                (cost, head_k, head.items)
            } else {
                (cost, tail_k, tail.items)
            };
        }
    }
    best
}

/// `k`: the backtracking items that multiply the cost.
pub(super) fn exponent(kind: Kind, shape: &Shape) -> u32 {
    let tried_everywhere = kind == Kind::Gmatch || !shape.caret;
    let k = shape.backtracking - usize::from(shape.ends_quantified) + usize::from(tried_everywhere);
    // Bounded by `MAX_ITEMS + 1` once the item count was checked.
    k as u32
}

/// The worst-case steps `C(n + k, k) · m`, in floating point (it only
/// meets a bound).
pub(super) fn steps(n: usize, k: u32, items: usize) -> f64 {
    let mut ways = 1.0_f64;
    for j in 1..=k {
        ways = ways * (n as f64 + f64::from(j)) / f64::from(j);
    }
    ways * items as f64
}

/// The longest subject a pattern of this `k` and `m` is allowed on.
fn longest(k: u32, items: usize) -> usize {
    let (mut low, mut high) = (0_usize, usize::MAX / 2);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if steps(mid, k, items) <= MAX_STEPS {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

/// Bytes of the subject from `init` on, as Lua reads `init`.
fn remaining(len: usize, init: Option<i64>) -> usize {
    let Some(init) = init else {
        return len;
    };
    let len_i = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if init > 0 {
        init
    } else if init == 0 || init < -len_i {
        1
    } else {
        len_i + init + 1
    };
    usize::try_from(len_i - (start - 1)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pattern: &str) -> usize {
        shape(pattern.as_bytes()).backtracking
    }

    #[test]
    fn backtracking_items_are_counted() {
        assert_eq!(q("hello"), 0);
        assert_eq!(q("^%s*(.-)%s*$"), 3);
        assert_eq!(q("a*a*b"), 2);
        assert_eq!(q("[%w_]+"), 1);
        assert_eq!(q("[]*]x"), 0, "`]` first in a set belongs to it");
        assert_eq!(q("[^]]+"), 1);
        assert_eq!(q("%b()"), 1);
        assert_eq!(q("%f[%w]%w+"), 2);
        assert_eq!(q("(a+)%1"), 2);
        assert_eq!(q("%%*"), 1, "an escaped `%` quantified");
        assert_eq!(q("%*"), 0, "an escaped `*` is a literal");
        assert_eq!(q("x?y?z?"), 3);
        assert_eq!(q("%d%d%d"), 0);
        assert_eq!(q("[a-z"), 0, "a malformed set is left to Lua");
        assert_eq!(q("%"), 0);
        let s = shape(b"^ab(c*)");
        assert_eq!((s.items, s.ends_quantified, s.caret), (3, true, true));
        assert!(!shape(b"plain text").special);
        assert!(shape(b"a.b").special);
    }

    #[test]
    fn the_exponent_drops_a_trailing_quantifier_and_counts_unanchored_starts() {
        let k = |kind, p: &str| exponent(kind, &shape(p.as_bytes()));
        assert_eq!(k(Kind::Gsub, "%s+"), 1);
        assert_eq!(k(Kind::Match, "^%s*(.-)%s*$"), 3);
        assert_eq!(k(Kind::Find, "a*a*b"), 3);
        assert_eq!(k(Kind::Find, "^a*a*b"), 2);
        assert_eq!(k(Kind::Gmatch, "^a*b"), 2, "gmatch has no anchor");
        assert_eq!(k(Kind::Match, "^(%w+)=(%w+)$"), 2);
    }

    #[test]
    fn calls_are_allowed_or_refused_by_their_worst_case() {
        let ok = |kind, n, p: &str| check(kind, n, p.as_bytes(), None, false);
        // Linear patterns on any subject the memory limit allows.
        ok(Kind::Gsub, 32 << 20, "%s+").unwrap();
        ok(Kind::Gmatch, 32 << 20, "[^,]+").unwrap();
        ok(Kind::Match, 32 << 20, "^(%w+)").unwrap();
        ok(Kind::Find, 32 << 20, "needle").unwrap();
        ok(Kind::Find, 10_000, "key=(%w+)").unwrap();
        // Quadratic: about ten thousand bytes. The trim idiom's head never
        // backtracks (its tail always matches), so it weighs as k = 2.
        ok(Kind::Match, 10_000, "^%s*(.-)%s*$").unwrap();
        ok(Kind::Find, 10_000, "%s*(.-)%s*$").unwrap();
        ok(Kind::Gsub, 10_000, "^%s*(.-)%s*$").unwrap();
        ok(Kind::Match, 12_000, "^%s*(.-)%s*$").unwrap_err();
        ok(Kind::Match, 10_000, "^(%w+)=(.-)%s*$").unwrap();
        // Not when the call goes on after a match, nor when the tail can fail.
        ok(Kind::Gsub, 10_000, "%s*(.-)%s*$").unwrap_err();
        ok(Kind::Gmatch, 10_000, "%s*(.-)%s*$").unwrap_err();
        ok(Kind::Match, 10_000, "^%s*(.-)%s+$").unwrap_err();
        ok(Kind::Match, 10_000, "^%s*(.-)x%s*$").unwrap_err();
        ok(Kind::Match, 10_000, "^%s*(.+)%s*$").unwrap_err();
        ok(Kind::Find, 10_000, "^a*a*b").unwrap();
        ok(Kind::Find, 30_000, "^a*a*b").unwrap_err();
        // The audit's cases.
        let trim = ok(Kind::Find, 200_002, "^%s*(.-)%s*$").unwrap_err();
        assert!(
            trim.contains("string.find: the pattern could backtrack")
                && trim.contains("2 counted backtracking items"),
            "{trim}"
        );
        ok(Kind::Find, 40_000, &"a-".repeat(40)).unwrap_err();
        let many = ok(Kind::Find, 10, &format!("{}b", "a-".repeat(9))).unwrap_err();
        assert!(many.contains("9 backtracking items"), "{many}");
        ok(Kind::Find, 10, &format!("^{}b", "a-".repeat(8))).unwrap();
        // Plain find is bounded by bytes compared only.
        check(Kind::Find, 1 << 20, b"a*a*a*a*a*a*a*a*a*", None, true).unwrap();
        check(Kind::Find, 16 << 20, &[b'a'; 8 << 20], None, true).unwrap_err();
    }

    #[test]
    fn init_shortens_the_subject() {
        assert_eq!(remaining(100, None), 100);
        assert_eq!(remaining(100, Some(1)), 100);
        assert_eq!(remaining(100, Some(91)), 10);
        assert_eq!(remaining(100, Some(-10)), 10);
        assert_eq!(remaining(100, Some(-1000)), 100);
        assert_eq!(remaining(100, Some(0)), 100);
        assert_eq!(remaining(100, Some(500)), 0);
        check(Kind::Find, 100_000, b"^a*a*a*b", Some(99_900), false).unwrap();
    }

    #[test]
    fn the_longest_allowed_subject_meets_the_bound() {
        for (k, m) in [(1, 1), (2, 3), (3, 5), (9, 9)] {
            let n = longest(k, m);
            assert!(steps(n, k, m) <= MAX_STEPS);
            assert!(steps(n + 1, k, m) > MAX_STEPS);
        }
    }
}
