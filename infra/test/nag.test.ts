/**
 * cdk-nag (AwsSolutions pack): no finding is left unacknowledged, every
 * acknowledgment has a written reason and is actually needed, and the real app
 * (with the pack as a validation plugin) synthesizes.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { createApp } from '../lib/app';
import { nagAcknowledgments } from '../lib/nag-suppressions';
import { TernStack } from '../lib/tern-stack';
import { defaultStack, synth } from './helpers';

function violations(scope: TernStack): string[] {
  const report = new AwsSolutionsChecks(scope, { verbose: true }).validateScope(scope);
  return report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.resourceLogicalId}`));
}

describe('cdk-nag AwsSolutions', () => {
  const { stack } = defaultStack();

  test('no unacknowledged finding', () => {
    expect(violations(stack)).toEqual([]);
  });

  test('no unacknowledged finding with provisioned tables and auto scaling either', () => {
    const provisioned = synth({ alarmEmail: 'ops@example.com' }, { 'tern:tableCapacityMode': 'provisioned' }).stack;
    expect(violations(provisioned)).toEqual([]);
  });

  test('no unacknowledged finding with tracing on (xray:PutTraceSegments on the four traced roles), with static egress too', () => {
    const traced = synth({}, { 'tern:otlpEndpoint': 'http://localhost:4318' }).stack;
    expect(violations(traced)).toEqual([]);
    const both = synth({}, { 'tern:otlpEndpoint': 'http://localhost:4318', 'tern:egress': 'static' }).stack;
    expect(violations(both)).toEqual([]);
    // One acknowledgment per role and finding: the relay's ListStreams reason and the tracing one joined.
    const relay = nagAcknowledgments(traced).filter((a) => a.scope === traced.functions.roles.relay && a.id === 'AwsSolutions-IAM5[Resource::*]');
    expect(relay).toHaveLength(1);
    expect(relay[0].reason).toMatch(/ListStreams/);
    expect(relay[0].reason).toMatch(/xray:PutTraceSegments/);
  });

  test('the acknowledged findings are exactly these eight, each with a reason', () => {
    const acks = nagAcknowledgments(stack);
    expect(acks.map((a) => `${a.id} on ${a.scope.node.path}`).sort()).toEqual([
      'AwsSolutions-APIG4 on Tern/Api/Http/ANY--portal--{proxy+}',
      'AwsSolutions-IAM5[Resource::*] on Tern/Functions/RelayRole',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*] on Tern/Functions/ApiRole',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*] on Tern/Functions/SenderRole',
      'AwsSolutions-SF1 on Tern/DelayedDelivery/StateMachine',
      'AwsSolutions-SF2 on Tern/DelayedDelivery/StateMachine',
      'AwsSolutions-SMG4 on Tern/Portal/Keys',
      'AwsSolutions-SQS3 on Tern/Queues/RelayFailures',
    ]);
    for (const a of acks) expect(a.reason.length).toBeGreaterThan(60);
  });

  test('every acknowledgment is needed: without them the same findings come back', () => {
    const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-nag-'));
    const app = createApp({ skipBundling: true, nag: false, outdir });
    const bare = new TernStack(app, 'Tern');
    // Drop the acknowledgments recorded on the constructs.
    for (const a of nagAcknowledgments(bare)) {
      const node = a.scope.node as unknown as { _metadata: Array<{ type: string }> };
      node._metadata = node._metadata.filter((m) => m.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY);
    }
    const found = violations(bare).map((v) => v.split(' at ')[0]).sort();
    expect(found).toEqual([
      'AwsSolutions-APIG4',
      'AwsSolutions-IAM5[Resource::*]',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*]',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:tern/mtls/*]',
      'AwsSolutions-SF1',
      'AwsSolutions-SF2',
      'AwsSolutions-SMG4',
      'AwsSolutions-SQS3',
    ]);
  });

  test('the app synthesizes with the pack registered as a validation plugin', () => {
    const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-nag-app-'));
    const app = createApp({ skipBundling: true, nag: true, outdir });
    new TernStack(app, 'Tern');
    expect(() => app.synth()).not.toThrow();
  });
});
