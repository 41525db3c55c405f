//! The demo's switches by name: one parse for every enum the command line names, and one
//! message when a name is none of them.

use seqsync::Result;

/// The value of `all` whose `name` is `s`; else [`Error::InvalidArgument`](seqsync::Error)
/// saying "unknown {what} '{s}': expected a, b or c".
pub(crate) fn parse_name<T: Copy>(
    s: &str,
    what: &str,
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T> {
    all.iter().copied().find(|&v| name(v) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&v| name(v)).collect();
        let expected = match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "nothing".to_string(),
        };
        crate::invalid("demo", format!("unknown {what} '{s}': expected {expected}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_parses_to_its_value_and_anything_else_lists_them_all() {
        let name = |v: u8| ["one", "two", "three"][v as usize];
        assert_eq!(parse_name("two", "number", &[0, 1, 2], name).unwrap(), 1);
        let e = parse_name("four", "number", &[0, 1, 2], name)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown number 'four': expected one, two or three"),
            "{e}"
        );
        let e = parse_name("x", "single", &[0], name)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown single 'x': expected one"), "{e}");
    }
}
