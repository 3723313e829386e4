//! Issue 28: the help text says what each command does. `tern --help` printed the
//! `waiting` command's text on `portal-rotate-key` (and none on `waiting`), and
//! `endpoints disable --help` said new events "skip" the endpoint, where they are
//! dead-lettered `endpoint_disabled`, recoverable by a replay.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .output()
        .expect("run tern");
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The summary line of `command` in `tern --help`'s command list.
fn summary<'a>(help: &'a str, command: &str) -> &'a str {
    help.lines()
        .find(|l| l.split_whitespace().next() == Some(command))
        .unwrap_or_else(|| panic!("{command} is not listed: {help}"))
}

#[test]
fn each_command_has_its_own_summary() {
    let top = help(&["--help"]);
    let rotate = summary(&top, "portal-rotate-key");
    assert!(rotate.contains("portal's signing key"), "{rotate}");
    assert!(!rotate.contains("waiting"), "{rotate}");
    let waiting = summary(&top, "waiting");
    assert!(waiting.contains("What is waiting"), "{waiting}");
    // Every command has a summary.
    let commands = top
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("Options:").next())
        .expect("a command list");
    for line in commands.lines().filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        assert!(words.next().is_some(), "{name} has no summary: {line:?}");
    }
}

#[test]
fn disable_says_deliveries_are_dead_lettered_not_skipped() {
    let text = help(&["endpoints", "disable", "--help"]);
    assert!(!text.contains("skip"), "{text}");
    assert!(text.contains("endpoint_disabled"), "{text}");
    assert!(text.contains("replay"), "{text}");
}

/// Issue 29 item 3: `tern audit`'s default grace is the library's (which covers a delivery
/// held back up to 900 s behind an open circuit), not a second number of its own.
#[test]
fn audit_grace_defaults_to_the_librarys() {
    let text = help(&["audit", "--help"]);
    let default = humantime::format_duration(tern_ops::audit::DEFAULT_GRACE).to_string();
    assert_eq!(default, "21m");
    assert!(text.contains(&format!("[default: {default}]")), "{text}");
}
