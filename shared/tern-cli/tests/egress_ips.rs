//! `tern egress-ips --stack <name>` through the real binary against moto: a CloudFormation
//! stack that allocates two Elastic IPs and outputs them as a static-egress Tern stack does
//! (`EgressIp1`, `EgressIp2`, `EgressIps`), read back by DescribeStacks; the addresses are
//! checked against EC2's own list (boto3's DescribeAddresses, not our code). Shared-egress
//! and foreign stacks, and a missing `--stack`, are errors that say what to do. Everything
//! stays on 127.0.0.1.

mod common;

use std::path::PathBuf;

use common::{expect, json, tern, text};
use tern_local::MotoServer;

/// AWS access to `moto` and nothing else (no TERN_* variable leaks in).
fn aws_env(moto: &MotoServer) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), moto.url.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
    ]
}

/// Creates stack `name` from `template` (JSON) on moto.
async fn create_stack(aws: &aws_config::SdkConfig, name: &str, template: &serde_json::Value) {
    aws_sdk_cloudformation::Client::new(aws)
        .create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("moto creates stack {name}: {e:?}"));
}

/// The venv's Python (the one that runs moto), for the independent check with boto3.
fn python() -> PathBuf {
    let moto = tern_local::moto::find_moto_server().expect("moto (the local AWS) is required");
    if moto.args.is_empty() {
        // $TERN_MOTO_SERVER names a moto_server executable: its venv's python sits beside it.
        moto.program.with_file_name("python")
    } else {
        moto.program
    }
}

/// Every Elastic IP moto's EC2 has allocated, as boto3 lists them.
fn ec2_public_ips(moto: &MotoServer) -> Vec<String> {
    let script = "import boto3, sys\n\
        ec2 = boto3.client('ec2', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
            aws_access_key_id='testing', aws_secret_access_key='testing')\n\
        print('\\n'.join(a['PublicIp'] for a in ec2.describe_addresses()['Addresses']))\n";
    let out = std::process::Command::new(python())
        .args(["-c", script, &moto.url])
        .output()
        .expect("python with boto3 runs");
    assert!(out.status.success(), "boto3: {}", text(&out.stderr));
    let mut ips: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    ips.sort();
    ips
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_a_static_stacks_elastic_ips_and_refuses_the_rest() {
    let moto = MotoServer::start()
        .await
        .expect("moto (the local AWS) is required for this test");
    let aws = moto.sdk_config().await;
    let env = aws_env(&moto);

    // What the static-egress stacks output (infra/lib/tern-stack.ts, infra/template.yaml),
    // over real Elastic IPs. moto answers Ref of an EIP with its address (it lacks GetAtt PublicIp).
    create_stack(
        &aws,
        "tern-static",
        &serde_json::json!({
            "Resources": {
                "EgressEip1": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
                "EgressEip2": {"Type": "AWS::EC2::EIP", "Properties": {"Domain": "vpc"}},
            },
            "Outputs": {
                "OutboxTableName": {"Value": "tern-static-outbox"},
                "EgressIp1": {"Value": {"Ref": "EgressEip1"}},
                "EgressIp2": {"Value": {"Ref": "EgressEip2"}},
                "EgressIps": {"Value": {"Fn::Join": [",", [{"Ref": "EgressEip1"}, {"Ref": "EgressEip2"}]]}},
            },
        }),
    )
    .await;
    let outputs: std::collections::HashMap<String, String> =
        aws_sdk_cloudformation::Client::new(&aws)
            .describe_stacks()
            .stack_name("tern-static")
            .send()
            .await
            .expect("describe")
            .stacks()[0]
            .outputs()
            .iter()
            .map(|o| {
                (
                    o.output_key().unwrap_or_default().to_owned(),
                    o.output_value().unwrap_or_default().to_owned(),
                )
            })
            .collect();

    // One address per line, zone 1 first; the same two EC2 allocated.
    let printed = expect(&env, &["--stack", "tern-static", "egress-ips"], 0);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines, [&outputs["EgressIp1"], &outputs["EgressIp2"]]);
    let mut sorted: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    sorted.sort();
    assert_eq!(sorted, ec2_public_ips(&moto));
    assert_eq!(sorted.len(), 2);

    // --json, and the stack from TERN_STACK.
    let mut with_stack = env.clone();
    with_stack.push(("TERN_STACK".into(), "tern-static".into()));
    let v = json(&with_stack, &["egress-ips", "--json"]);
    assert_eq!(
        v,
        serde_json::json!({
            "stack": "tern-static",
            "egress": "static",
            "ips": [outputs["EgressIp1"], outputs["EgressIp2"]],
        })
    );

    // A Tern stack with shared egress has no fixed address: an error that says how to get one.
    create_stack(
        &aws,
        "tern-shared",
        &serde_json::json!({
            "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {"OutboxTableName": {"Value": "tern-shared-outbox"}},
        }),
    )
    .await;
    let out = tern(&env, &["--stack", "tern-shared", "egress-ips"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty(), "no address printed");
    let err = text(&out.stderr);
    assert!(
        err.contains("egress: shared") && err.contains("tern:egress=static"),
        "{err}"
    );

    // A stack that is not Tern's.
    create_stack(
        &aws,
        "not-tern",
        &serde_json::json!({
            "Resources": {"Marker": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {"Bucket": {"Value": "b"}},
        }),
    )
    .await;
    let out = tern(&env, &["--stack", "not-tern", "egress-ips"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is it a Tern stack?"),
        "{}",
        text(&out.stderr)
    );

    // No stack named, and a stack that does not exist.
    let out = tern(&env, &["egress-ips"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("pass --stack <name>"),
        "{}",
        text(&out.stderr)
    );
    let out = tern(&env, &["--stack", "no-such-stack", "egress-ips"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("stack no-such-stack does not exist"),
        "{}",
        text(&out.stderr)
    );
    moto.stop().await;
}
