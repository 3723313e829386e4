//! Text cut for a table cell or a page: every screen that shows receiver or tenant text
//! (the CLI's tables, the console, the portal) cuts it the same way.

/// `text` cut to at most `max` characters (Unicode scalar values, not bytes: a cut never
/// splits a character), followed by `…` when something was cut off.
pub fn cut(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let mut kept: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        kept.push('…');
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_on_characters_and_marks_the_cut() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
        assert_eq!(cut("ééé", 2), "éé…");
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("a", 0), "…");
    }
}
