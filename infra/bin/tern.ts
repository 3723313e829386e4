#!/usr/bin/env node
/**
 * The Tern CDK app. `npx cdk deploy` builds the three Rust functions with
 * cargo-lambda (RustFunction) and deploys the stack `Tern` (`-c tern:stackName=...`
 * to change it). Every `tern:*` context value is documented in infra/README.md.
 */
import { App } from 'aws-cdk-lib';
import { addNag } from '../lib/app';
import { TernStack } from '../lib/tern-stack';

// The cdk CLI passes cdk.json's context (and -c values) to this process.
const app = new App();
// cdk-nag runs on every synth and deploy; -c tern:nag=false turns it off (not recommended).
if (String(app.node.tryGetContext('tern:nag') ?? 'true') !== 'false') addNag(app);
new TernStack(app, String(app.node.tryGetContext('tern:stackName') ?? 'Tern'), {
  description: 'Tern webhook delivery: outbox relay, sender, retries, dead letters',
  env: { account: process.env.CDK_DEFAULT_ACCOUNT, region: process.env.CDK_DEFAULT_REGION },
});
app.synth();
