//! `tern egress-ips --stack <name>`: the fixed source IPs of a stack deployed with
//! `egress: static` (issue 20), read from its `EgressIps` output (CloudFormation
//! DescribeStacks, the same lookup as `--stack`). One address per line, so the list can go
//! straight into a receiver's firewall request; `--json` adds the stack and the mode.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;

use serde::Serialize;
use tern_ops::OpsError;

use crate::{Ctx, print_json, write_err};

/// The output both stacks write with `egress: static`: every Elastic IP, comma-separated
/// (`infra/lib/tern-stack.ts`, `infra/template.yaml`).
pub const EGRESS_IPS_OUTPUT: &str = "EgressIps";

/// An output every Tern stack has, whatever its egress: tells a shared-egress Tern stack
/// from a stack that is not Tern's.
const TERN_MARKER_OUTPUT: &str = "OutboxTableName";

/// Most addresses an `EgressIps` output may hold: one per availability zone, and the stacks
/// allow at most 3 (`infra/settings.json` egress.availabilityZones). Anything longer is not
/// the output Tern wrote.
pub const MAX_EGRESS_IPS: usize = 3;

/// Most characters of a stack's output echoed in an error (the value is the stack's data).
const ECHO_CHARS: usize = 120;

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct EgressReport<'a> {
    /// The stack asked about.
    pub stack: &'a str,
    /// Always `static`: a shared-egress stack is an error, not an empty list.
    pub egress: &'static str,
    /// The addresses, availability zone 1 first.
    pub ips: Vec<IpAddr>,
}

/// The addresses in `stack`'s outputs.
///
/// # Errors
/// [`OpsError::Invalid`] when the stack sends from AWS's shared ranges (no `EgressIps`
/// output but a Tern stack: there is no fixed address to give receivers, and an empty list
/// would read as "admit nobody"), when it is not a Tern stack, or when the output is not
/// 1 to [`MAX_EGRESS_IPS`] comma-separated IP addresses.
pub fn egress_ips(stack: &str, outputs: &HashMap<String, String>) -> Result<Vec<IpAddr>, OpsError> {
    let Some(value) = outputs.get(EGRESS_IPS_OUTPUT) else {
        return Err(OpsError::Invalid(
            if outputs.contains_key(TERN_MARKER_OUTPUT) {
                format!(
                    "stack {stack} has no fixed source IPs: it sends from AWS's shared Lambda address ranges \
                 (egress: shared). Deploy it with -c tern:egress=static (CDK) or Egress=static (SAM) \
                 to send from Elastic IPs (docs/security.md, \"Fixed source IPs\")"
                )
            } else {
                format!(
                    "stack {stack} has no output {EGRESS_IPS_OUTPUT} or {TERN_MARKER_OUTPUT}: is it a Tern stack?"
                )
            },
        ));
    };
    let not_a_list = || {
        let shown: String = value.chars().take(ECHO_CHARS).collect();
        OpsError::Invalid(format!(
            "stack {stack}'s output {EGRESS_IPS_OUTPUT} is {shown:?}, not 1 to {MAX_EGRESS_IPS} comma-separated IP addresses"
        ))
    };
    let ips = value
        .split(',')
        .map(|part| part.trim().parse::<IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| not_a_list())?;
    if ips.is_empty() || ips.len() > MAX_EGRESS_IPS {
        return Err(not_a_list());
    }
    Ok(ips)
}

/// Prints the stack's fixed source IPs: one per line, or the [`EgressReport`] with `--json`.
///
/// # Errors
/// As [`egress_ips`]; [`OpsError::Invalid`] when `ctx` was not made from `--stack`, or
/// writing fails.
pub fn print(ctx: &Ctx, out: &mut dyn Write) -> Result<(), OpsError> {
    let Some((stack, outputs)) = ctx.names.stack_outputs() else {
        return Err(OpsError::Invalid(
            "tern egress-ips reads a deployed stack's outputs: pass --stack <name> (or set TERN_STACK)".into(),
        ));
    };
    let ips = egress_ips(stack, outputs)?;
    if ctx.json {
        return print_json(
            out,
            &EgressReport {
                stack,
                egress: "static",
                ips,
            },
        );
    }
    for ip in ips {
        writeln!(out, "{ip}").map_err(write_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_the_comma_separated_output_in_zone_order() {
        let ips = egress_ips(
            "Tern",
            &outputs(&[("EgressIps", "203.0.113.7,198.51.100.9")]),
        )
        .expect("two addresses");
        assert_eq!(
            ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["203.0.113.7", "198.51.100.9"]
        );
    }

    #[test]
    fn a_shared_egress_tern_stack_is_an_error_that_says_how_to_turn_it_on() {
        let e = egress_ips("Tern", &outputs(&[("OutboxTableName", "t")])).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("egress: shared"), "{text}");
        assert!(text.contains("tern:egress=static"), "{text}");
    }

    #[test]
    fn a_stack_that_is_not_terns_is_named_as_such() {
        let e = egress_ips("Other", &outputs(&[("Bucket", "b")])).unwrap_err();
        assert!(e.to_string().contains("is it a Tern stack?"), "{e}");
    }

    #[test]
    fn refuses_what_is_not_a_short_list_of_addresses() {
        for bad in [
            "",
            "203.0.113.7,",
            "not-an-ip",
            "1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4",
        ] {
            let e = egress_ips("Tern", &outputs(&[("EgressIps", bad)])).unwrap_err();
            assert!(e.to_string().contains("not 1 to 3"), "{bad:?}: {e}");
        }
        // A long value is echoed cut short.
        let long = "x".repeat(10_000);
        let e = egress_ips("Tern", &outputs(&[("EgressIps", &long)])).unwrap_err();
        assert!(e.to_string().len() < 400);
    }
}
