//! A connection string with its passwords replaced, for logs, errors and
//! `check-config`: the `user:password@` of a URL, a URL's `password`
//! query parameter, and a key=value string's `password` (libpq's forms:
//! spaces around `=`, a value quoted in `'…'` with `\` escapes).

/// What a password is shown as.
const REDACTED: &str = "<redacted>";

/// `url` with every password in it replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", redact_uri(rest)),
        None => redact_pairs(url),
    }
}

/// The part of a URL after `scheme://`: its authority's password and its
/// query's `password` (or any key written with `%` escapes, which could
/// spell it).
fn redact_uri(rest: &str) -> String {
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(at) => before_query.split_at(at),
        None => (before_query, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:{REDACTED}@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let Some(query) = query else {
        return format!("{authority}{path}");
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key == "password" || key.contains('%') => {
                format!("{key}={REDACTED}")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{authority}{path}?{}", pairs.join("&"))
}

/// A key=value string with the `password` pair's value replaced; pairs are
/// written back as `key=value`, separated by one space.
fn redact_pairs(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut chars = text.char_indices().peekable();
    let skip_spaces = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_spaces(&mut chars);
        let Some(&(key_start, _)) = chars.peek() else {
            break;
        };
        while chars
            .next_if(|(_, c)| *c != '=' && !c.is_whitespace())
            .is_some()
        {}
        let key_end = chars.peek().map_or(text.len(), |(i, _)| *i);
        let key = &text[key_start..key_end];
        skip_spaces(&mut chars);
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            // A word without a value: no secret in it.
            out.push(key.to_owned());
            continue;
        }
        skip_spaces(&mut chars);
        let value_start = chars.peek().map_or(text.len(), |(i, _)| *i);
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        while let Some((_, c)) = chars.next() {
            if c == '\\' {
                chars.next();
            } else if (quoted && c == '\'') || (!quoted && c.is_whitespace()) {
                break;
            }
        }
        let value_end = chars.peek().map_or(text.len(), |(i, _)| *i);
        let value = text[value_start..value_end].trim_end();
        if key == "password" {
            out.push(format!("{key}={REDACTED}"));
        } else {
            out.push(format!("{key}={value}"));
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(
            redact_url("postgres://swarmd:hunter2@db:5432/x?sslmode=disable&password=x2"),
            "postgres://swarmd:<redacted>@db:5432/x?sslmode=disable&password=<redacted>"
        );
        assert_eq!(
            redact_url("postgresql://swarmd@db/x"),
            "postgresql://swarmd@db/x"
        );
        // The password as the first parameter after a database, with no
        // database, or spelled with escapes.
        for (url, shown) in [
            (
                "postgres://swarmd@db/x?password=pgquerypass4",
                "postgres://swarmd@db/x?password=<redacted>",
            ),
            (
                "postgres://swarmd@db?password=p2&sslmode=disable",
                "postgres://swarmd@db?password=<redacted>&sslmode=disable",
            ),
            (
                "postgres://db/x?pass%77ord=p3",
                "postgres://db/x?pass%77ord=<redacted>",
            ),
            (
                "postgres://u:p%40ss@h1,h2/x",
                "postgres://u:<redacted>@h1,h2/x",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn key_value_strings_lose_their_passwords_in_every_form_libpq_reads() {
        for (text, shown) in [
            (
                "host=db user=swarmd password=hunter2 dbname=x",
                "host=db user=swarmd password=<redacted> dbname=x",
            ),
            (
                "host=db user=swarmd password = spaced dbname=x",
                "host=db user=swarmd password=<redacted> dbname=x",
            ),
            (
                "host=db password='pg kv pass3' dbname=x",
                "host=db password=<redacted> dbname=x",
            ),
            (
                r"password='a\'b pgesc14' host=db",
                "password=<redacted> host=db",
            ),
            (r"password=a\ b host=db", "password=<redacted> host=db"),
            ("password=", "password=<redacted>"),
            ("host='my db' port=5432", "host='my db' port=5432"),
        ] {
            let redacted = redact_url(text);
            assert_eq!(redacted, shown, "{text}");
            for secret in ["hunter2", "spaced", "kv", "pass3", "pgesc14", "a\\"] {
                assert!(!redacted.contains(secret), "{text}: {redacted}");
            }
        }
    }
}
