//! Names users declare (stages, threads, streams, buffers, graph commands): what makes one fit
//! to print and to pass on, and how a message shows one.

/// The longest name a spec may declare, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 128;

/// Why `name` is not fit to be a name, if it is not: empty, longer than [`MAX_NAME_LEN`]
/// bytes, holding a control character (NUL, newline, escape, …), or starting or ending with
/// white space.
pub(crate) fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("it is empty".to_string())
    } else if name.len() > MAX_NAME_LEN {
        Some(format!(
            "{} bytes long, more than the {MAX_NAME_LEN} a name may have",
            name.len()
        ))
    } else if let Some(c) = name.chars().find(|c| c.is_control()) {
        Some(format!(
            "it holds the control character {c:?}, which cannot be printed"
        ))
    } else if name.trim() != name {
        Some("it starts or ends with white space".to_string())
    } else {
        None
    }
}

/// `name` quoted, escaped (control characters as `\n`, `\u{1b}`, …) and cut to 40 characters,
/// for a one-line message that cannot reach a terminal's control sequences.
pub(crate) fn quoted(name: &str) -> String {
    let mut s: String = name.chars().take(40).flat_map(char::escape_debug).collect();
    if name.chars().nth(40).is_some() {
        s.push('…');
    }
    format!("`{s}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_names_pass_and_unfit_ones_say_why() {
        assert_eq!(problem("h2g"), None);
        assert_eq!(problem("étape 2"), None);
        for (bad, why) in [
            ("", "empty"),
            ("a\0b", "control"),
            ("a\nb", "control"),
            ("\u{1b}[31m", "control"),
            (" a", "white space"),
        ] {
            assert!(problem(bad).unwrap().contains(why), "{bad:?}");
        }
        assert!(problem(&"x".repeat(MAX_NAME_LEN + 1)).is_some());
        assert_eq!(quoted("a\u{1b}b"), "`a\\u{1b}b`");
        assert!(quoted(&"y".repeat(100)).ends_with("…`"));
    }
}
