/**
 * The PostgreSQL relay (issue 31; docs/outbox.md, "Deploying the PostgreSQL relay"): off by
 * default, with nothing of it in either template; on, relay-pg runs in the database's VPC every
 * minute with the stream relay's grants minus the stream, the network-interface actions, no
 * Secrets Manager action (the URL is a dynamic reference), four alarms; CDK and SAM agree.
 */
import { AwsSolutionsChecks } from 'cdk-nag';
import { CfnElement } from 'aws-cdk-lib';
import { nagAcknowledgments } from '../lib/nag-suppressions';
import { TernStack } from '../lib/tern-stack';
import { CfnTemplate, defaultStack, samTemplate, settings, synth, Synthesized } from './helpers';
import { conditionHolds, Names, normalizeValue } from './normalize';

const SECRET = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:tern/outbox-db-AbCdEf';
const SUBNETS = ['subnet-0a1b2c3d', 'subnet-0e1f2a3b'];
const GROUPS = ['sg-0123abcd'];
const ON = {
  'tern:postgresOutbox': 'true',
  'tern:postgresOutboxSecretArn': SECRET,
  'tern:postgresOutboxSubnetIds': SUBNETS.join(','),
  'tern:postgresOutboxSecurityGroupIds': GROUPS.join(','),
};

let onStack: Synthesized | undefined;
const enabled = (): Synthesized => (onStack ??= synth({ alarmEmail: 'ops@example.com' }, ON));

const lid = (stack: TernStack, c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
const ofType = (t: CfnTemplate, type: string) => Object.entries(t.Resources).filter(([, r]) => r.Type === type);
const PG_METRICS = ['OutboxLag', 'OutboxRelayErrors'];
const EC2 = (s: any) => [s.Action].flat().some((a: string) => a.startsWith('ec2:'));
const LOGS = (s: any) => [s.Action].flat().some((a: string) => a.startsWith('logs:'));
const STREAM = (s: any) => [s.Action].flat().some((a: string) => /^dynamodb:(ListStreams|DescribeStream|GetRecords|GetShardIterator)$/.test(a));
/** Statements as (action, resource, condition) triples, so that grouping and order do not matter. */
function flat(statements: any[]): string[] {
  return statements
    .flatMap((s) =>
      [s.Action].flat().flatMap((a: string) =>
        [s.Resource].flat().map((r: unknown) => JSON.stringify({ Action: a, Resource: r, Condition: s.Condition })),
      ),
    )
    .sort();
}
function rolePolicy(json: CfnTemplate, roleId: string): any[] {
  return Object.values(json.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
    .flatMap((r) => r.Properties.PolicyDocument.Statement);
}

/** template.yaml with the PostgresOutbox parameters' defaults set as a deployment would. */
function samOn(): CfnTemplate {
  const t = samTemplate();
  t.Parameters!.PostgresOutbox.Default = 'true';
  t.Parameters!.PostgresOutboxDatabaseSecretArn.Default = SECRET;
  t.Parameters!.PostgresOutboxSubnetIds.Default = SUBNETS.join(',');
  t.Parameters!.PostgresOutboxSecurityGroupIds.Default = GROUPS.join(',');
  return t;
}

describe('postgresOutbox off (the default)', () => {
  test('settings.json: off; a timeout a little over the 60 s schedule; 2 reserved executions; lag alarm at 300 s', () => {
    expect(settings.postgresOutbox).toMatchObject({
      enabled: false,
      timeoutSeconds: 70,
      reservedConcurrency: 2,
      scheduleExpression: 'rate(1 minute)',
    });
    expect(settings.alarms.pgRelayLagSeconds).toBe(300);
  });

  test('CDK: no relay-pg function, schedule, invoke config, VPC function or PostgreSQL alarm', () => {
    const { stack, json } = defaultStack();
    expect(stack.functions.relayPg).toBeUndefined();
    expect(Object.keys(json.Resources).filter((k) => /RelayPg/.test(k))).toEqual([]);
    expect(ofType(json, 'AWS::Events::Rule')).toEqual([]);
    expect(ofType(json, 'AWS::Lambda::EventInvokeConfig')).toEqual([]);
    for (const [, fn] of ofType(json, 'AWS::Lambda::Function')) expect(fn.Properties.VpcConfig).toBeUndefined();
    expect(JSON.stringify(json)).not.toContain('TERN_OUTBOX_DATABASE_URL');
    for (const [, a] of ofType(json, 'AWS::CloudWatch::Alarm')) expect(PG_METRICS).not.toContain(a.Properties.MetricName);
  });

  test('SAM at its defaults: PostgresOutbox false, and every relay-pg resource is behind that false condition', () => {
    const t = samTemplate();
    expect(t.Parameters!.PostgresOutbox.Default).toBe(String(settings.postgresOutbox.enabled));
    const pg = Object.entries(t.Resources).filter(([id, r]) => /RelayPg/.test(id) || JSON.stringify(r).includes('RelayPgFunction') || PG_METRICS.includes(r.Properties?.MetricName));
    expect(pg.map(([id]) => id).sort()).toEqual([
      'RelayPgDatabaseErrorsAlarm',
      'RelayPgErrorsAlarm',
      'RelayPgFunction',
      'RelayPgLagAlarm',
      'RelayPgLogGroup',
      'RelayPgThrottlesAlarm',
    ]);
    for (const [id, r] of pg) expect([id, r.Condition, conditionHolds(r.Condition!, {}, t)]).toEqual([id, 'PostgresOutbox', false]);
  });
});

describe('postgresOutbox on', () => {
  test('the settings are checked: a secret ARN, subnet ids and security group ids are required', () => {
    expect(() => synth({}, { 'tern:postgresOutbox': 'true' })).toThrow(/postgresOutboxSecretArn must be a Secrets Manager secret ARN/);
    expect(() => synth({}, { ...ON, 'tern:postgresOutboxSubnetIds': '' })).toThrow(/postgresOutboxSubnetIds must list subnet ids/);
    expect(() => synth({}, { ...ON, 'tern:postgresOutboxSecurityGroupIds': 'default' })).toThrow(/postgresOutboxSecurityGroupIds must list security group ids/);
  });

  test('relay-pg: arm64, provided.al2023, 70 s, 2 reserved, in the given subnets, the URL as a dynamic reference of the secret', () => {
    const { stack, json } = enabled();
    const p = json.Resources[lid(stack, stack.functions.relayPg!)].Properties;
    expect(p).toMatchObject({
      Architectures: ['arm64'],
      Runtime: 'provided.al2023',
      Handler: 'bootstrap',
      Timeout: 70,
      MemorySize: settings.postgresOutbox.memoryMb,
      ReservedConcurrentExecutions: 2,
      VpcConfig: { SubnetIds: SUBNETS, SecurityGroupIds: GROUPS },
    });
    // The relay polls until 12 s before its deadline: 70 s leaves about 58 s of each minute.
    expect(p.Timeout).toBeGreaterThan(60);
    expect(p.Timeout - 12).toBeLessThanOrEqual(60);
    expect(p.Environment.Variables).toMatchObject({
      TERN_OUTBOX_DATABASE_URL: `{{resolve:secretsmanager:${SECRET}}}`,
      TERN_PG_RELAY_BATCH_ROWS: '100',
      TERN_PG_RELAY_POLL_MS: '250',
      TERN_OUTBOX_RETENTION_HOURS: '168',
      TERN_ENDPOINTS_TABLE: { Ref: lid(stack, stack.storage.endpoints) },
      TERN_DELIVERY_QUEUE_URL: { Ref: lid(stack, stack.queues.delivery) },
    });
    // The same fan-out settings as the stream relay.
    const relayEnv = json.Resources[lid(stack, stack.functions.relay)].Properties.Environment.Variables;
    for (const k of Object.keys(relayEnv)) expect([k, p.Environment.Variables[k]]).toEqual([k, relayEnv[k]]);
  });

  test('started every minute by an EventBridge rule, no retry, an invocation dropped after 60 s', () => {
    const { stack, json } = enabled();
    const fnId = lid(stack, stack.functions.relayPg!);
    const rules = ofType(json, 'AWS::Events::Rule');
    expect(rules).toHaveLength(1);
    expect(rules[0][1].Properties).toMatchObject({ ScheduleExpression: 'rate(1 minute)', State: 'ENABLED' });
    expect(rules[0][1].Properties.Targets).toEqual([{ Arn: { 'Fn::GetAtt': [fnId, 'Arn'] }, Id: 'Target0' }]);
    const permissions = ofType(json, 'AWS::Lambda::Permission').filter(([, r]) => r.Properties.Principal === 'events.amazonaws.com');
    expect(permissions.map(([, r]) => r.Properties.FunctionName)).toEqual([{ 'Fn::GetAtt': [fnId, 'Arn'] }]);
    const config = ofType(json, 'AWS::Lambda::EventInvokeConfig');
    expect(config.map(([, r]) => r.Properties)).toEqual([
      { FunctionName: { Ref: fnId }, Qualifier: '$LATEST', MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
    ]);
  });

  test("IAM: the stream relay's grants minus the stream, the network-interface actions scoped, nothing else (no Secrets Manager)", () => {
    const { stack, json } = enabled();
    const pg = rolePolicy(json, lid(stack, stack.functions.roles['relay-pg']));
    const relay = rolePolicy(json, lid(stack, stack.functions.roles.relay));
    const own = (statements: any[]) => statements.filter((s) => !EC2(s) && !LOGS(s) && !STREAM(s));
    // The stream mapping adds sqs:GetQueueAttributes/GetQueueUrl with its OnFailure queue: not the relay's code.
    const relayCode = own(relay).flatMap((s) =>
      [s.Action].flat().includes('sqs:GetQueueAttributes') ? [{ ...s, Action: 'sqs:SendMessage' }] : [s],
    );
    expect(flat(own(pg))).toEqual(flat(relayCode));
    expect(JSON.stringify(pg)).not.toContain('secretsmanager');
    expect(JSON.stringify(pg)).not.toMatch(/dynamodb:(ListStreams|DescribeStream|GetRecords|GetShardIterator)/);
    const eni = { 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':network-interface/*']] };
    const arnOf = (kind: string, id: string) => ({
      'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':ec2:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, `:${kind}/${id}`]],
    });
    expect(flat(pg.filter(EC2))).toEqual(
      flat([
        { Action: ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets'], Resource: '*' },
        { Action: 'ec2:CreateNetworkInterface', Resource: [eni, ...SUBNETS.map((s) => arnOf('subnet', s)), ...GROUPS.map((g) => arnOf('security-group', g))] },
        { Action: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'], Resource: eni },
      ]),
    );
    expect(json.Resources[lid(stack, stack.functions.roles['relay-pg'] as any)].Properties.ManagedPolicyArns).toBeUndefined();
  });

  test('alarms: errors, throttles, database errors (EMF) and lag > 300 s (EMF, missing data breaching), all to the topic', () => {
    const { stack, json } = enabled();
    const fnId = lid(stack, stack.functions.relayPg!);
    const topic = { Ref: lid(stack, stack.alarms.topic as any) };
    const pg = ofType(json, 'AWS::CloudWatch::Alarm')
      .map(([, r]) => r.Properties)
      .filter((p) => String(JSON.stringify(p.Dimensions)).includes(fnId) || PG_METRICS.includes(p.MetricName));
    const got = pg.map((p) => [p.Namespace, p.MetricName, p.Statistic, p.Period, p.Threshold, p.TreatMissingData]).sort();
    expect(got).toEqual(
      [
        ['AWS/Lambda', 'Errors', 'Sum', 300, 0, 'notBreaching'],
        ['AWS/Lambda', 'Throttles', 'Sum', 300, 0, 'notBreaching'],
        ['Tern', 'OutboxLag', 'Maximum', 300, 300, 'breaching'],
        ['Tern', 'OutboxRelayErrors', 'Sum', 300, 0, 'notBreaching'],
      ].sort(),
    );
    for (const p of pg) {
      expect(p.AlarmActions).toEqual([topic]);
      expect(p.OKActions).toEqual([topic]);
      expect(p.ComparisonOperator).toBe('GreaterThanThreshold');
    }
  });

  test('cdk-nag: no unacknowledged finding; the two extra acknowledgments are the network-interface grants of relay-pg', () => {
    const { stack } = enabled();
    const report = new AwsSolutionsChecks(stack, { verbose: true }).validateScope(stack);
    expect(report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`))).toEqual([]);
    const extra = nagAcknowledgments(stack).filter((a) => !nagAcknowledgments(defaultStack().stack).some((d) => d.id === a.id && d.scope.node.path === a.scope.node.path));
    expect(extra.map((a) => `${a.id} on ${a.scope.node.path}`).sort()).toEqual([
      'AwsSolutions-IAM5[Resource::*] on Tern/Functions/RelayPgRole',
      'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*] on Tern/Functions/RelayPgRole',
    ]);
  });
});

describe('postgresOutbox on: CDK and SAM agree', () => {
  const t = samOn();
  const names: Names = {
    EndpointsTable: 'endpoints',
    AttemptsTable: 'attempts',
    DeliveryQueue: 'delivery',
    RelayFailureQueue: 'relayFailures',
    RelayPgFunction: 'relayPg',
    RelayPgLogGroup: 'relayPgLogs',
    AlarmTopic: 'topic',
  };
  const cdkNames = (stack: TernStack): Names => ({
    [lid(stack, stack.storage.endpoints)]: 'endpoints',
    [lid(stack, stack.storage.attempts)]: 'attempts',
    [lid(stack, stack.queues.delivery)]: 'delivery',
    [lid(stack, stack.queues.relayFailures)]: 'relayFailures',
    [lid(stack, stack.functions.relayPg!)]: 'relayPg',
    [lid(stack, stack.functions.logGroups['relay-pg'] as any)]: 'relayPgLogs',
    [lid(stack, stack.alarms.topic as any)]: 'topic',
  });
  /** `!Sub` with parameters only, resolved at their defaults (the one template.yaml uses here). */
  const sub = (v: unknown): unknown => {
    if (v && typeof v === 'object' && 'Fn::Sub' in (v as any)) {
      return String((v as any)['Fn::Sub']).replace(/\$\{([A-Za-z0-9]+)\}/g, (_, p) => String(t.Parameters![p].Default));
    }
    return v;
  };
  const list = (v: unknown) => (typeof v === 'string' ? v.split(',') : v);

  test('every relay-pg resource is deployed when PostgresOutbox is true', () => {
    for (const id of ['RelayPgFunction', 'RelayPgLogGroup', 'RelayPgLagAlarm']) expect(conditionHolds(t.Resources[id].Condition!, names, t)).toBe(true);
  });

  test('function: runtime, arch, timeout, memory, reserved concurrency, environment, VPC, invoke config', () => {
    const { stack, json } = enabled();
    const cn = cdkNames(stack);
    const c = json.Resources[lid(stack, stack.functions.relayPg!)].Properties;
    const s = t.Resources.RelayPgFunction.Properties;
    const envOf = (vars: Record<string, unknown>, n: Names, tpl: CfnTemplate) =>
      Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, String(normalizeValue(sub(v), n, tpl))]).sort());
    const invoke = Object.values(json.Resources).find((r) => r.Type === 'AWS::Lambda::EventInvokeConfig')!.Properties;
    expect({
      Runtime: s.Runtime,
      Architectures: s.Architectures,
      Handler: s.Handler,
      Timeout: s.Timeout,
      MemorySize: s.MemorySize,
      ReservedConcurrentExecutions: s.ReservedConcurrentExecutions,
      Environment: envOf(s.Environment.Variables, names, t),
      SubnetIds: list(normalizeValue(s.VpcConfig.SubnetIds, names, t)),
      SecurityGroupIds: list(normalizeValue(s.VpcConfig.SecurityGroupIds, names, t)),
      LogGroup: normalizeValue(s.LoggingConfig.LogGroup, names, t),
      MaximumRetryAttempts: s.EventInvokeConfig.MaximumRetryAttempts,
      MaximumEventAgeInSeconds: s.EventInvokeConfig.MaximumEventAgeInSeconds,
    }).toEqual({
      Runtime: c.Runtime,
      Architectures: c.Architectures,
      Handler: c.Handler,
      Timeout: c.Timeout,
      MemorySize: c.MemorySize,
      ReservedConcurrentExecutions: c.ReservedConcurrentExecutions,
      Environment: envOf(c.Environment.Variables, cn, json),
      SubnetIds: c.VpcConfig.SubnetIds,
      SecurityGroupIds: c.VpcConfig.SecurityGroupIds,
      LogGroup: normalizeValue(c.LoggingConfig.LogGroup, cn, json),
      MaximumRetryAttempts: invoke.MaximumRetryAttempts,
      MaximumEventAgeInSeconds: invoke.MaximumEventAgeInSeconds,
    });
    expect(t.Resources.RelayPgFunction.Metadata).toMatchObject({ BuildMethod: 'rust-cargolambda', BuildProperties: { Binary: 'relay-pg' } });
  });

  test('schedule: the same expression', () => {
    const { json } = enabled();
    const rule = Object.values(json.Resources).find((r) => r.Type === 'AWS::Events::Rule')!.Properties;
    const events = Object.values(t.Resources.RelayPgFunction.Properties.Events) as any[];
    expect(events.map((e) => [e.Type, e.Properties.Schedule])).toEqual([['Schedule', rule.ScheduleExpression]]);
  });

  test("IAM: the same statements (SAM adds AWSLambdaVPCAccessExecutionRole for the network interfaces, CDK grants its actions scoped)", () => {
    const { stack, json } = enabled();
    const cn = cdkNames(stack);
    const cdk = rolePolicy(json, lid(stack, stack.functions.roles['relay-pg']))
      .filter((s) => !EC2(s) && !LOGS(s))
      .map((s) => normalizeValue(s, cn, json));
    const sam = (t.Resources.RelayPgFunction.Properties.Policies as any[]).flatMap((p) => p.Statement).map((s) => normalizeValue(s, names, t));
    expect(flat(sam)).toEqual(flat(cdk));
  });

  test('alarms: the same metrics, statistics, periods, thresholds, missing-data treatment and actions', () => {
    const { stack, json } = enabled();
    const cn = cdkNames(stack);
    const pick = (tpl: CfnTemplate, n: Names) =>
      Object.values(tpl.Resources)
        .filter((r) => r.Type === 'AWS::CloudWatch::Alarm' && (!r.Condition || conditionHolds(r.Condition, n, tpl)))
        .map((r) => r.Properties)
        .filter((p) => String(JSON.stringify(normalizeValue(p.Dimensions, n, tpl))).includes('relayPg') || PG_METRICS.includes(p.MetricName))
        .map((p) =>
          JSON.stringify(
            normalizeValue(
              {
                Namespace: p.Namespace,
                MetricName: p.MetricName,
                Dimensions: p.Dimensions,
                Statistic: p.Statistic,
                Period: Number(p.Period),
                Threshold: Number(p.Threshold),
                ComparisonOperator: p.ComparisonOperator,
                EvaluationPeriods: Number(p.EvaluationPeriods),
                DatapointsToAlarm: Number(p.DatapointsToAlarm),
                TreatMissingData: p.TreatMissingData,
                AlarmActions: p.AlarmActions,
                OKActions: p.OKActions,
              },
              n,
              tpl,
            ),
          ),
        )
        .sort();
    const cdk = pick(json, cn);
    expect(cdk).toHaveLength(4);
    expect(pick(t, names)).toEqual(cdk);
  });
});
