/**
 * The synthesized template carries every setting of infra/settings.json and the
 * contract (DESIGN.md section 6): tables, queues, state machine, functions,
 * mappings, IAM, alarms, dashboard and outputs.
 */
import * as fs from 'fs';
import * as path from 'path';
import { CfnElement, Stack } from 'aws-cdk-lib';
import { Match } from 'aws-cdk-lib/assertions';
import { API_ACCESS_LOG_FORMAT, PORTAL_ROUTE_KEY } from '../lib/constructs/api';
import { API_REQUEST_DEADLINE_SECONDS, HTTP_API_INTEGRATION_TIMEOUT_SECONDS, STATE_MACHINE_DEFINITION_FILE } from '../lib/settings';
import { dashboardWidgets, defaultStack, only, samTemplate, settings } from './helpers';

const { stack, template, json, outdir } = defaultStack();
const logicalId = (c: { node: { defaultChild?: unknown } }) => stack.getLogicalId(c.node.defaultChild as CfnElement);
const resource = (c: { node: { defaultChild?: unknown } }) => json.Resources[logicalId(c)];
const ref = (c: { node: { defaultChild?: unknown } }) => ({ Ref: logicalId(c) });
const arn = (c: { node: { defaultChild?: unknown } }, attr = 'Arn') => ({ 'Fn::GetAtt': [logicalId(c), attr] });


/** The tracing variables of a stack with the default settings: tracing off (docs/tracing.md). */
const TRACING_OFF = {
  OTEL_EXPORTER_OTLP_ENDPOINT: '',
  OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
  OTEL_TRACES_SAMPLER_ARG: '0.05',
};

describe('tables', () => {
  test.each([
    ['outbox', () => stack.storage.outbox, settings.tables.outbox],
    ['endpoints', () => stack.storage.endpoints, settings.tables.endpoints],
    ['attempts', () => stack.storage.attempts, settings.tables.attempts],
    ['health', () => stack.storage.health, settings.tables.health],
  ] as const)('%s: keys, TTL, stream, PITR, SSE, retained', (_name, table, s) => {
    const r = resource(table());
    const keys = [{ AttributeName: s.partitionKey, KeyType: 'HASH' }];
    if (s.sortKey) keys.push({ AttributeName: s.sortKey, KeyType: 'RANGE' });
    expect(r.Properties.KeySchema).toEqual(keys);
    expect(r.Properties.BillingMode).toBe('PAY_PER_REQUEST');
    expect(r.Properties.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
    expect(r.Properties.SSESpecification).toEqual({ SSEEnabled: true });
    expect(r.Properties.TimeToLiveSpecification).toEqual(
      s.ttlAttribute ? { AttributeName: s.ttlAttribute, Enabled: true } : undefined,
    );
    expect(r.Properties.StreamSpecification).toEqual(s.streamViewType ? { StreamViewType: s.streamViewType } : undefined);
    expect(r.DeletionPolicy).toBe('Retain');
    expect(r.UpdateReplacePolicy).toBe('Retain');
  });

  test('outbox streams NEW_IMAGE and expires on expires_at', () => {
    expect(resource(stack.storage.outbox).Properties).toMatchObject({
      StreamSpecification: { StreamViewType: 'NEW_IMAGE' },
      TimeToLiveSpecification: { AttributeName: 'expires_at', Enabled: true },
    });
  });

  test('exactly five tables (the four of the pipeline and the portal\'s)', () => template.resourceCountIs('AWS::DynamoDB::Table', 5));

  test('portal: one string key, a TTL, on-demand, encrypted, point-in-time recovery (settings.json tables.portal)', () => {
    const t = settings.tables.portal;
    expect(resource(stack.portal.table).Properties).toMatchObject({
      KeySchema: [{ AttributeName: t.partitionKey, KeyType: 'HASH' }],
      TimeToLiveSpecification: { AttributeName: t.ttlAttribute, Enabled: true },
      BillingMode: 'PAY_PER_REQUEST',
      SSESpecification: { SSEEnabled: true },
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
    });
  });

  test("portal key ring: a generated secret of one key {id, secret} (what tern_core::portal::KeyRing reads)", () => {
    expect(resource(stack.portal.keys).Properties.GenerateSecretString).toMatchObject({
      SecretStringTemplate: JSON.stringify({ id: 'k1' }),
      GenerateStringKey: 'secret',
      PasswordLength: 64,
      ExcludePunctuation: true,
    });
  });

  test('attempts: the sparse waiting index of settings.json (string endpoint key, number due time, INCLUDE)', () => {
    const w = settings.tables.attempts.waitingIndex!;
    const p = resource(stack.storage.attempts).Properties;
    expect(p.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: w.name,
        KeySchema: [
          { AttributeName: w.partitionKey, KeyType: 'HASH' },
          { AttributeName: w.sortKey, KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: w.projectedAttributes },
      },
    ]);
    expect(p.AttributeDefinitions).toEqual(
      expect.arrayContaining([
        { AttributeName: w.partitionKey, AttributeType: 'S' },
        { AttributeName: w.sortKey, AttributeType: 'N' },
      ]),
    );
    // The outbox and endpoints tables have no index (the health table's is below).
    for (const t of [stack.storage.outbox, stack.storage.endpoints]) {
      expect(resource(t).Properties.GlobalSecondaryIndexes).toBeUndefined();
    }
  });

  test('health: one item per endpoint, its own partition key (<tenant>#<endpoint>), no stream, no TTL', () => {
    // What tern_aws::health writes (HEALTH_KEY, TENANT_INDEX; a Rust test pins them to settings.json).
    expect(settings.tables.health.partitionKey).toBe('endpoint_key');
    expect(settings.tables.health.sortKey).toBeUndefined();
    const p = resource(stack.storage.health).Properties;
    expect(p.KeySchema).toEqual([{ AttributeName: 'endpoint_key', KeyType: 'HASH' }]);
    expect(p.StreamSpecification).toBeUndefined();
    expect(p.TimeToLiveSpecification).toBeUndefined();
  });

  test("health: the KEYS_ONLY tenant index of settings.json (a tenant's endpoints)", () => {
    const i = settings.tables.health.tenantIndex!;
    expect(i).toEqual({ name: 'tenant', partitionKey: 'tenant_id', sortKey: 'endpoint_id' });
    const p = resource(stack.storage.health).Properties;
    expect(p.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: i.name,
        KeySchema: [
          { AttributeName: i.partitionKey, KeyType: 'HASH' },
          { AttributeName: i.sortKey, KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'KEYS_ONLY' },
      },
    ]);
    expect(p.AttributeDefinitions).toEqual(
      expect.arrayContaining([
        { AttributeName: 'endpoint_key', AttributeType: 'S' },
        { AttributeName: i.partitionKey, AttributeType: 'S' },
        { AttributeName: i.sortKey, AttributeType: 'S' },
      ]),
    );
  });
});

describe('queues', () => {
  test('delivery queue: visibility from settings, >= 6 x sender timeout, redrive to the DLQ', () => {
    const p = resource(stack.queues.delivery).Properties;
    expect(p.VisibilityTimeout).toBe(settings.queues.delivery.visibilityTimeoutSeconds);
    const senderTimeout = resource(stack.functions.sender).Properties.Timeout;
    expect(senderTimeout).toBe(settings.functions.sender.timeoutSeconds);
    expect(p.VisibilityTimeout).toBeGreaterThanOrEqual(6 * senderTimeout);
    expect(p.RedrivePolicy).toEqual({ deadLetterTargetArn: arn(stack.queues.dlq), maxReceiveCount: 5 });
    expect(p.RedrivePolicy.maxReceiveCount).toBe(settings.queues.delivery.maxReceiveCount);
    expect(p.MessageRetentionPeriod).toBe(settings.queues.delivery.messageRetentionSeconds);
  });

  test.each([
    ['delivery', () => stack.queues.delivery, settings.queues.delivery.messageRetentionSeconds],
    ['dlq', () => stack.queues.dlq, settings.queues.dlq.messageRetentionSeconds],
    ['relayFailures', () => stack.queues.relayFailures, settings.queues.relayFailures.messageRetentionSeconds],
  ] as const)('%s: SSE, retention and a TLS-only policy', (_name, queue, retention) => {
    const p = resource(queue()).Properties;
    expect(p.SqsManagedSseEnabled).toBe(true);
    expect(p.MessageRetentionPeriod).toBe(retention);
    template.hasResourceProperties('AWS::SQS::QueuePolicy', {
      Queues: [ref(queue())],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: 'Deny',
            Action: 'sqs:*',
            Condition: { Bool: { 'aws:SecureTransport': 'false' } },
          }),
        ]),
      },
    });
  });

  test('exactly three queues', () => template.resourceCountIs('AWS::SQS::Queue', 3));
});

describe('delayed delivery state machine', () => {
  const sm = () => resource(stack.delayedDelivery.stateMachine);

  test('is STANDARD', () => {
    expect(sm().Properties.StateMachineType).toBe('STANDARD');
  });

  test('its definition is statemachine/delayed-delivery.asl.json, byte for byte', () => {
    const key: string = sm().Properties.DefinitionS3Location.Key;
    const staged = fs.readdirSync(outdir).find((f) => key.startsWith(f.replace(/^asset\./, '').replace(/\.json$/, '')));
    expect(staged).toBeDefined();
    const stagedPath = path.join(outdir, staged!);
    expect(fs.readFileSync(stagedPath, 'utf-8')).toBe(fs.readFileSync(STATE_MACHINE_DEFINITION_FILE, 'utf-8'));
    const def = JSON.parse(fs.readFileSync(stagedPath, 'utf-8'));
    expect(def.States.Wait).toMatchObject({ Type: 'Wait', SecondsPath: '$.wait_seconds', Next: 'HasGroup' });
    // The tenant is the MessageGroupId (SQS fair queue); an input from an older sender,
    // without group_id, is still sent rather than failed.
    expect(def.States.HasGroup).toEqual({
      Type: 'Choice',
      Choices: [{ Variable: '$.group_id', IsPresent: true, Next: 'Enqueue' }],
      Default: 'EnqueueWithoutGroup',
    });
    expect(def.States.Enqueue.Parameters).toEqual({
      'QueueUrl.$': '$.queue_url',
      'MessageBody.$': '$.body',
      'MessageGroupId.$': '$.group_id',
    });
    expect(def.States.EnqueueWithoutGroup.Parameters).toEqual({ 'QueueUrl.$': '$.queue_url', 'MessageBody.$': '$.body' });
    for (const name of ['Enqueue', 'EnqueueWithoutGroup']) {
      expect(def.States[name]).toMatchObject({ Resource: 'arn:aws:states:::sqs:sendMessage', End: true });
    }
  });

  test('its role may only sqs:SendMessage to the delivery queue', () => {
    const roleId = sm().Properties.RoleArn['Fn::GetAtt'][0];
    const role = json.Resources[roleId];
    expect(role.Properties.ManagedPolicyArns).toBeUndefined();
    expect(role.Properties.Policies).toBeUndefined();
    expect(statementsOfRole(roleId)).toEqual([
      { Action: 'sqs:SendMessage', Effect: 'Allow', Resource: arn(stack.queues.delivery) },
    ]);
  });
});

/** Every statement of the AWS::IAM::Policy resources attached to a role. */
function statementsOfRole(roleId: string): any[] {
  return Object.values(json.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy' && r.Properties.Roles.some((x: any) => x.Ref === roleId))
    .flatMap((r) => r.Properties.PolicyDocument.Statement);
}

/** "action on resource" pairs, resources named by role ("outbox.StreamArn", "delivery", "*"). */
function permissions(roleId: string): string[] {
  const names = new Map<string, string>([
    [logicalId(stack.storage.outbox), 'outbox'],
    [logicalId(stack.storage.endpoints), 'endpoints'],
    [logicalId(stack.storage.attempts), 'attempts'],
    [logicalId(stack.storage.health), 'health'],
    [logicalId(stack.portal.table), 'portal'],
    [logicalId(stack.portal.keys), 'portalKeys'],
    [logicalId(stack.operational.topic), 'operationalTopic'],
    [logicalId(stack.queues.delivery), 'delivery'],
    [logicalId(stack.queues.dlq), 'dlq'],
    [logicalId(stack.queues.relayFailures), 'relayFailures'],
    [logicalId(stack.delayedDelivery.stateMachine), 'stateMachine'],
    [logicalId(stack.functions.replay), 'replayFunction'],
    [logicalId(stack.storage.secretsKey), 'secretsKey'],
  ]);
  const resName = (r: any): string => {
    if (r === '*') return '*';
    if (r.Ref) return names.get(r.Ref) ?? r.Ref;
    // `<table ARN>/index/<name>`: one named index, never `index/*`.
    if (r['Fn::Join']) return r['Fn::Join'][1].map((p: any) => (typeof p === 'string' ? p : resName(p))).join('');
    const [id, attr] = r['Fn::GetAtt'];
    if (json.Resources[id].Type === 'AWS::Logs::LogGroup') return 'own log group';
    return attr === 'Arn' ? names.get(id) ?? id : `${names.get(id) ?? id}.${attr}`;
  };
  const out: string[] = [];
  for (const s of statementsOfRole(roleId)) {
    expect(s.Effect).toBe('Allow');
    for (const a of [s.Action].flat()) for (const r of [s.Resource].flat()) out.push(`${a} on ${resName(r)}`);
  }
  return out.sort();
}

describe('functions', () => {
  const fns = [
    ['relay', () => stack.functions.relay, settings.functions.relay],
    ['sender', () => stack.functions.sender, settings.functions.sender],
    ['replay', () => stack.functions.replay, settings.functions.replay],
    ['console', () => stack.functions.console, settings.functions.console],
    ['api', () => stack.functions.api, settings.functions.api],
  ] as const;

  test.each(fns)('%s: arm64, provided.al2023, bootstrap, timeout and memory from settings', (_n, fn, s) => {
    expect(resource(fn()).Properties).toMatchObject({
      Architectures: ['arm64'],
      Runtime: 'provided.al2023',
      Handler: 'bootstrap',
      Timeout: s.timeoutSeconds,
      MemorySize: s.memoryMb,
    });
  });

  test.each(fns)('%s: own log group with retention from settings, own role without managed policies', (_n, fn) => {
    const p = resource(fn()).Properties;
    const lg = json.Resources[p.LoggingConfig.LogGroup.Ref];
    expect(lg.Type).toBe('AWS::Logs::LogGroup');
    expect(lg.Properties.RetentionInDays).toBe(settings.logs.retentionDays);
    const role = json.Resources[p.Role['Fn::GetAtt'][0]];
    expect(role.Properties.ManagedPolicyArns).toBeUndefined();
  });

  test('relay environment', () => {
    expect(resource(stack.functions.relay).Properties.Environment.Variables).toEqual({
      RUST_LOG: 'info',
      ...TRACING_OFF,
      TERN_METRICS_NAMESPACE: 'Tern',
      TERN_ENDPOINTS_TABLE: ref(stack.storage.endpoints),
      TERN_ATTEMPTS_TABLE: ref(stack.storage.attempts),
      TERN_DELIVERY_QUEUE_URL: ref(stack.queues.delivery),
      TERN_RELAY_FAILURE_QUEUE_URL: ref(stack.queues.relayFailures),
      TERN_MAX_PAYLOAD_BYTES: String(settings.delivery.maxPayloadBytes),
      TERN_ATTEMPT_LOG_TTL_DAYS: String(settings.delivery.attemptLogTtlDays),
    });
  });

  test('sender environment', () => {
    expect(resource(stack.functions.sender).Properties.Environment.Variables).toEqual({
      RUST_LOG: 'info',
      ...TRACING_OFF,
      TERN_METRICS_NAMESPACE: 'Tern',
      TERN_ENDPOINTS_TABLE: ref(stack.storage.endpoints),
      TERN_ATTEMPTS_TABLE: ref(stack.storage.attempts),
      TERN_DELIVERY_QUEUE_URL: ref(stack.queues.delivery),
      TERN_DLQ_URL: ref(stack.queues.dlq),
      TERN_DELAY_STATE_MACHINE_ARN: ref(stack.delayedDelivery.stateMachine),
      TERN_RETRY_SCHEDULE: '60,300,1800,7200,36000,86400',
      TERN_ATTEMPT_TIMEOUT_MS: String(settings.delivery.attemptTimeoutMs),
      TERN_RETRY_AFTER_CEILING_SECONDS: String(settings.delivery.retryAfterCeilingSeconds),
      TERN_HTTPS_ONLY: 'true',
      TERN_NAT64: 'false',
      TERN_ATTEMPT_LOG_TTL_DAYS: String(settings.delivery.attemptLogTtlDays),
      TERN_HEALTH_TABLE: ref(stack.storage.health),
      TERN_HEALTH_FAILURE_THRESHOLD: '5',
      TERN_HEALTH_PROBE_INTERVAL_SECONDS: '60',
      TERN_HEALTH_WINDOW_SECONDS: '3600',
      TERN_HEALTH_DISABLE_BELOW_PERCENT: '50',
      TERN_HEALTH_DEGRADED_BELOW_PERCENT: '95',
      TERN_HEALTH_MIN_ATTEMPTS: '20',
      TERN_HEALTH_MAX_PAUSE_SECONDS: '3600',
      TERN_OPERATIONAL_TOPIC_ARN: ref(stack.operational.topic),
      TERN_OUTBOX_TABLE: ref(stack.storage.outbox),
      TERN_SECRETS_KEY_ID: arn(stack.storage.secretsKey),
    });
    expect(settings.health).toMatchObject({
      failureThreshold: 5,
      probeIntervalSeconds: 60,
      windowSeconds: 3600,
      disableBelowPercent: 50,
      degradedBelowPercent: 95,
      minAttempts: 20,
      maxPauseSeconds: 3600,
    });
    expect(settings.delivery.retrySchedule.join(',')).toBe('60,300,1800,7200,36000,86400');
  });

  test('replay environment', () => {
    expect(resource(stack.functions.replay).Properties.Environment.Variables).toEqual({
      RUST_LOG: 'info',
      ...TRACING_OFF,
      TERN_METRICS_NAMESPACE: 'Tern',
      TERN_DLQ_URL: ref(stack.queues.dlq),
      TERN_DELIVERY_QUEUE_URL: ref(stack.queues.delivery),
      // The per-tenant dead-letter record.
      TERN_ATTEMPTS_TABLE: ref(stack.storage.attempts),
    });
  });

  test('console environment: the stores it reads and the replay function it invokes', () => {
    expect(resource(stack.functions.console).Properties.Environment.Variables).toEqual({
      RUST_LOG: 'info',
      TERN_METRICS_NAMESPACE: 'Tern',
      TERN_ENDPOINTS_TABLE: ref(stack.storage.endpoints),
      TERN_ATTEMPTS_TABLE: ref(stack.storage.attempts),
      TERN_HEALTH_TABLE: ref(stack.storage.health),
      TERN_DLQ_URL: ref(stack.queues.dlq),
      TERN_REPLAY_FUNCTION: ref(stack.functions.replay),
      // The "Is anything lost?" widget's stores and the schedule it judges overdue retries by.
      TERN_OUTBOX_TABLE: ref(stack.storage.outbox),
      TERN_RELAY_FAILURE_QUEUE_URL: ref(stack.queues.relayFailures),
      TERN_DELIVERY_QUEUE_URL: ref(stack.queues.delivery),
      TERN_RETRY_SCHEDULE: settings.delivery.retrySchedule.join(','),
      // The sender's thresholds: the Endpoints widget names the states the sender acts on.
      TERN_HEALTH_FAILURE_THRESHOLD: String(settings.health.failureThreshold),
      TERN_HEALTH_PROBE_INTERVAL_SECONDS: String(settings.health.probeIntervalSeconds),
      TERN_HEALTH_WINDOW_SECONDS: String(settings.health.windowSeconds),
      TERN_HEALTH_DISABLE_BELOW_PERCENT: String(settings.health.disableBelowPercent),
      TERN_HEALTH_DEGRADED_BELOW_PERCENT: String(settings.health.degradedBelowPercent),
      TERN_HEALTH_MIN_ATTEMPTS: String(settings.health.minAttempts),
      TERN_HEALTH_MAX_PAUSE_SECONDS: String(settings.health.maxPauseSeconds),
    });
  });

  test('api environment: the four tables, the two queues, and the settings the sender and relay apply', () => {
    expect(resource(stack.functions.api).Properties.Environment.Variables).toEqual({
      RUST_LOG: 'info',
      ...TRACING_OFF,
      TERN_ENDPOINTS_TABLE: ref(stack.storage.endpoints),
      TERN_ATTEMPTS_TABLE: ref(stack.storage.attempts),
      TERN_OUTBOX_TABLE: ref(stack.storage.outbox),
      TERN_HEALTH_TABLE: ref(stack.storage.health),
      TERN_DELIVERY_QUEUE_URL: ref(stack.queues.delivery),
      TERN_DLQ_URL: ref(stack.queues.dlq),
      TERN_MAX_PAYLOAD_BYTES: String(settings.delivery.maxPayloadBytes),
      TERN_ATTEMPT_TIMEOUT_MS: String(settings.delivery.attemptTimeoutMs),
      TERN_HTTPS_ONLY: 'true',
      TERN_NAT64: String(settings.delivery.nat64),
      TERN_ATTEMPT_LOG_TTL_DAYS: String(settings.delivery.attemptLogTtlDays),
      TERN_OUTBOX_TTL_DAYS: String(settings.delivery.outboxTtlDays),
      TERN_HEALTH_FAILURE_THRESHOLD: String(settings.health.failureThreshold),
      TERN_HEALTH_PROBE_INTERVAL_SECONDS: String(settings.health.probeIntervalSeconds),
      TERN_HEALTH_WINDOW_SECONDS: String(settings.health.windowSeconds),
      TERN_HEALTH_DISABLE_BELOW_PERCENT: String(settings.health.disableBelowPercent),
      TERN_HEALTH_DEGRADED_BELOW_PERCENT: String(settings.health.degradedBelowPercent),
      TERN_HEALTH_MIN_ATTEMPTS: String(settings.health.minAttempts),
      TERN_HEALTH_MAX_PAUSE_SECONDS: String(settings.health.maxPauseSeconds),
      TERN_SECRETS_KEY_ID: arn(stack.storage.secretsKey),
      TERN_PORTAL_TABLE: ref(stack.portal.table),
      TERN_PORTAL_KEY_SECRET: ref(stack.portal.keys),
      TERN_PORTAL_FRAME_ANCESTORS: '',
      TERN_PORTAL_SESSIONS_PER_MINUTE: String(settings.portal.sessionsPerMinute),
      TERN_PORTAL_TEST_SENDS_PER_MINUTE: String(settings.portal.testSendsPerMinute),
    });
  });

  test("api timeout: above the router's 25 s deadline, below API Gateway's 30 s integration timeout", () => {
    const timeout = resource(stack.functions.api).Properties.Timeout;
    expect(timeout).toBeGreaterThan(API_REQUEST_DEADLINE_SECONDS);
    expect(timeout).toBeLessThan(HTTP_API_INTEGRATION_TIMEOUT_SECONDS);
  });

  test('attempt timeout is well below the sender timeout', () => {
    expect(settings.delivery.attemptTimeoutMs * 2).toBeLessThanOrEqual(settings.functions.sender.timeoutSeconds * 1000);
  });

  test('code comes from the workspace through cargo-lambda-cdk (RustFunction)', () => {
    const { RustFunction } = require('cargo-lambda-cdk');
    for (const fn of [stack.functions.relay, stack.functions.sender, stack.functions.replay]) {
      expect(fn).toBeInstanceOf(RustFunction);
    }
  });
});

describe('least-privilege IAM', () => {
  const roleOf = (fn: { node: { defaultChild?: unknown } }) => resource(fn).Properties.Role['Fn::GetAtt'][0];

  test('relay: read the outbox stream, Query endpoints, its checkpoint items in attempts, send to delivery and relay-failure queues', () => {
    expect(permissions(roleOf(stack.functions.relay))).toEqual(
      [
        'dynamodb:DescribeStream on outbox.StreamArn',
        'dynamodb:GetRecords on outbox.StreamArn',
        'dynamodb:GetShardIterator on outbox.StreamArn',
        'dynamodb:ListStreams on *',
        'dynamodb:Query on endpoints',
        'dynamodb:GetItem on endpoints',
        'dynamodb:GetItem on attempts',
        'dynamodb:PutItem on attempts',
        'logs:CreateLogStream on own log group',
        'logs:PutLogEvents on own log group',
        'sqs:SendMessage on delivery',
        // Added by the OnFailure destination (SqsDlq grants send).
        'sqs:GetQueueAttributes on relayFailures',
        'sqs:GetQueueUrl on relayFailures',
        'sqs:SendMessage on relayFailures',
      ].sort(),
    );
  });

  test('relay: GetItem on endpoints only of the subscriptions-version items', () => {
    const gets = statementsOfRole(roleOf(stack.functions.relay)).filter(
      (s: any) => JSON.stringify(s.Resource).includes(logicalId(stack.storage.endpoints)) && JSON.stringify(s.Action).includes('GetItem'),
    );
    expect(gets).toHaveLength(1);
    expect(gets[0].Action).toEqual('dynamodb:GetItem');
    expect(gets[0].Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['#subscriptions#*'] } });
  });

  test('relay: the attempts table only through the checkpoint item\'s attributes', () => {
    const onAttempts = statementsOfRole(roleOf(stack.functions.relay)).filter((s: any) =>
      JSON.stringify(s.Resource).includes(logicalId(stack.storage.attempts)),
    );
    expect(onAttempts).toHaveLength(1);
    expect(onAttempts[0].Condition).toEqual({
      'ForAllValues:StringEquals': { 'dynamodb:Attributes': ['event_id', 'sk', 'fanout_through', 'fanout_shards', 'expires_at'] },
      StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
    });
  });

  test('sender: endpoints and attempts items, consume and re-enqueue, DLQ, start executions', () => {
    expect(permissions(roleOf(stack.functions.sender))).toEqual(
      [
        'dynamodb:GetItem on endpoints',
        'dynamodb:PutItem on endpoints',
        'dynamodb:Query on endpoints',
        'dynamodb:UpdateItem on endpoints',
        'dynamodb:PutItem on attempts',
        'dynamodb:Query on attempts',
        'dynamodb:UpdateItem on attempts',
        // The SQS mapping's consume grant.
        'sqs:ChangeMessageVisibility on delivery',
        'sqs:DeleteMessage on delivery',
        'sqs:GetQueueAttributes on delivery',
        'sqs:GetQueueUrl on delivery',
        'sqs:ReceiveMessage on delivery',
        'sqs:SendMessage on delivery',
        'sqs:SendMessage on dlq',
        'states:StartExecution on stateMachine',
        // Health items: read, create, update (counters, circuit, probe claim).
        // Health: read the record (GetItem), add a batch and make conditional transitions (UpdateItem).
        'dynamodb:GetItem on health',
        'dynamodb:UpdateItem on health',
        // Operational events: the topic, and tern.endpoint.* outbox events (conditional put).
        'sns:Publish on operationalTopic',
        'dynamodb:PutItem on outbox',
        // Endpoint secrets at rest: it opens them, never seals (it writes no secret): the
        // keyring's epoch keys, and values sealed before the keyring (conditions pinned below).
        'kms:Decrypt on secretsKey',
        'kms:Decrypt on secretsKey',
        // Mutual TLS: client certificate secrets under the settings' prefix only.
        `secretsmanager:GetSecretValue on arn:AWS::Partition:secretsmanager:AWS::Region:AWS::AccountId:secret:${settings.delivery.mtlsSecretPrefix}*`,
        'logs:CreateLogStream on own log group',
        'logs:PutLogEvents on own log group',
      ].sort(),
    );
  });

  test('replay: take from the DLQ, send to the delivery queue, read and trim the dead-letter record', () => {
    expect(permissions(roleOf(stack.functions.replay))).toEqual(
      [
        'sqs:ChangeMessageVisibility on dlq',
        'sqs:DeleteMessage on dlq',
        'sqs:ReceiveMessage on dlq',
        'sqs:SendMessage on delivery',
        // The tenant's dead-letter record: read (a Query per shard, the pairs' states), and
        // the removal of what a replay moved (DeleteItem on `dl#*` partitions only).
        'dynamodb:Query on attempts',
        'dynamodb:BatchGetItem on attempts',
        'dynamodb:DeleteItem on attempts',
        'logs:CreateLogStream on own log group',
        'logs:PutLogEvents on own log group',
      ].sort(),
    );
  });

  test('console: read the DLQ without deleting, list and enable endpoints, read attempts, invoke replay, audit', () => {
    expect(permissions(roleOf(stack.functions.console))).toEqual(
      [
        // tern_ops::peek receives, then releases (ChangeMessageVisibility 0): no DeleteMessage.
        'sqs:ChangeMessageVisibility on dlq',
        'sqs:ReceiveMessage on dlq',
        'dynamodb:Scan on endpoints',
        // Enable.
        'dynamodb:UpdateItem on endpoints',
        'dynamodb:Query on attempts',
        // The dead letters widget reads the per-tenant record (the pairs' states in one batch).
        'dynamodb:BatchGetItem on attempts',
        // The waiting index (Waiting and Endpoints widgets), by name: no `index/*`.
        'dynamodb:Query on attempts/index/waiting',
        'dynamodb:Scan on attempts/index/waiting',
        // The unqualified function only: no version or alias wildcard.
        'lambda:InvokeFunction on replayFunction',
        // Health: read, and Enable deletes the endpoint's record (it starts afresh).
        'dynamodb:DeleteItem on health',
        'dynamodb:GetItem on health',
        'dynamodb:Query on health',
        'dynamodb:Scan on health',
        // Enable's reset puts back a rate-limit schedule ahead and the kept history.
        'dynamodb:UpdateItem on health',
        // Is anything lost? The outbox scanned, the relay-failure queue read and released,
        // the delivery queue counted.
        'dynamodb:Scan on outbox',
        'sqs:ChangeMessageVisibility on relayFailures',
        'sqs:ReceiveMessage on relayFailures',
        'sqs:GetQueueAttributes on delivery',
        'logs:CreateLogStream on own log group',
        'logs:PutLogEvents on own log group',
      ].sort(),
    );
  });

  test('api: exactly the items its routes read and write, the delivery queue, the DLQ; no Scan, one index (waiting, Query), no attempt writes but a replayed dead letter\'s removal', () => {
    expect(permissions(roleOf(stack.functions.api))).toEqual(
      [
        // Read one (ownership), list a tenant's, create, PATCH/enable/disable/rotate, delete.
        'dynamodb:GetItem on endpoints',
        'dynamodb:Query on endpoints',
        'dynamodb:PutItem on endpoints',
        'dynamodb:UpdateItem on endpoints',
        'dynamodb:DeleteItem on endpoints',
        // An event's attempts and pair states, an endpoint's log: the table.
        'dynamodb:Query on attempts',
        // An endpoint's health counts its waiting deliveries: the waiting index, by name.
        'dynamodb:Query on attempts/index/waiting',
        // The dead-letter record: the pairs' states of a list, and a replayed entry's removal
        // (DeleteItem on `dl#*` partitions only).
        'dynamodb:BatchGetItem on attempts',
        'dynamodb:DeleteItem on attempts',
        // Publish (conditional put) and read an event.
        'dynamodb:PutItem on outbox',
        'dynamodb:GetItem on outbox',
        // The health view, and enable's reset (delete, then put back what it keeps).
        'dynamodb:GetItem on health',
        'dynamodb:DeleteItem on health',
        'dynamodb:UpdateItem on health',
        // Resend, recover and replay.
        'sqs:SendMessage on delivery',
        // The tenant's dead letters: read, let go, and delete what a replay moved.
        'sqs:ReceiveMessage on dlq',
        'sqs:ChangeMessageVisibility on dlq',
        'sqs:DeleteMessage on dlq',
        // Endpoint secrets at rest: seal what it writes, open what it reads (the keyring's
        // epoch keys, and values sealed before the keyring; conditions pinned below).
        'kms:GenerateDataKey on secretsKey',
        'kms:Decrypt on secretsKey',
        'kms:Decrypt on secretsKey',
        // The portal table: a link's one use, a rate-limit window, an Idempotency-Key's claim,
        // kept answer and release (all conditional writes; a refused claim returns the record),
        // and the key ring (read only). No read, no delete.
        'dynamodb:PutItem on portal',
        'dynamodb:UpdateItem on portal',
        'secretsmanager:GetSecretValue on portalKeys',
        // A test send offers the endpoint's client certificate: the sender's grant.
        `secretsmanager:GetSecretValue on arn:AWS::Partition:secretsmanager:AWS::Region:AWS::AccountId:secret:${settings.delivery.mtlsSecretPrefix}*`,
        'logs:CreateLogStream on own log group',
        'logs:PutLogEvents on own log group',
      ].sort(),
    );
  });

  test('a dead-letter entry is removed only from the record\'s partitions (api and replay): no other attempts item can be deleted', () => {
    for (const fn of [stack.functions.api, stack.functions.replay]) {
      const deletes = statementsOfRole(roleOf(fn)).filter((st) =>
        [st.Action].flat().includes('dynamodb:DeleteItem') &&
        [st.Resource].flat().some((r: any) => r?.['Fn::GetAtt']?.[0] === logicalId(stack.storage.attempts)),
      );
      expect(deletes).toHaveLength(1);
      expect(deletes[0].Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['dl#*'] } });
    }
  });

  test('an enable\'s reset (api and console) updates a health item only in the attributes it puts back, returning nothing', () => {
    for (const fn of [stack.functions.api, stack.functions.console]) {
      const updates = statementsOfRole(roleOf(fn)).filter((st) =>
        [st.Action].flat().includes('dynamodb:UpdateItem') &&
        [st.Resource].flat().some((r: any) => r?.['Fn::GetAtt']?.[0] === logicalId(stack.storage.health)),
      );
      expect(updates).toHaveLength(1);
      expect(updates[0].Condition).toEqual({
        // tern_aws::health reset: the key, `rt`, and the history it keeps.
        'ForAllValues:StringLike': {
          'dynamodb:Attributes': ['endpoint_key', 'tenant_id', 'endpoint_id', 'rt', 'ls', 'bs', 'pe', 'pa', 'lf_*', 'h*', 'k*'],
        },
        StringEqualsIfExists: { 'dynamodb:ReturnValues': 'NONE' },
      });
    }
    // The SAM template's two roles say the same.
    const t = samTemplate();
    for (const fn of ['ApiFunction', 'ConsoleFunction']) {
      const updates = t.Resources[fn].Properties.Policies.flatMap((p: any) => p.Statement).filter(
        (st: any) => [st.Action].flat().includes('dynamodb:UpdateItem') && JSON.stringify(st.Resource).includes('HealthTable'),
      );
      expect(updates).toHaveLength(1);
      expect(updates[0].Condition).toEqual({
        'ForAllValues:StringLike': {
          'dynamodb:Attributes': ['endpoint_key', 'tenant_id', 'endpoint_id', 'rt', 'ls', 'bs', 'pe', 'pa', 'lf_*', 'h*', 'k*'],
        },
        StringEqualsIfExists: { 'dynamodb:ReturnValues': 'NONE' },
      });
    }
  });

  test('only the sender and the api write the outbox, and only PutItem (operational events, publish; the application writes the rest)', () => {
    for (const fn of [stack.functions.relay, stack.functions.replay]) {
      expect(permissions(roleOf(fn)).filter((p) => p.endsWith(' on outbox'))).toEqual([]);
    }
    // The console only reads it (the "Is anything lost?" widget's Scan).
    expect(permissions(roleOf(stack.functions.console)).filter((p) => p.endsWith(' on outbox'))).toEqual([
      'dynamodb:Scan on outbox',
    ]);
    expect(permissions(roleOf(stack.functions.sender)).filter((p) => p.endsWith(' on outbox'))).toEqual([
      'dynamodb:PutItem on outbox',
    ]);
    expect(permissions(roleOf(stack.functions.api)).filter((p) => p.endsWith(' on outbox') && !p.startsWith('dynamodb:GetItem'))).toEqual([
      'dynamodb:PutItem on outbox',
    ]);
  });

  test('KMS: only the secrets key, Decrypt by the sender and the api alone, each under an encryption context; the operational topic uses the AWS managed SNS key', () => {
    const kms = (fn: Parameters<typeof roleOf>[0]) => permissions(roleOf(fn)).filter((p) => p.startsWith('kms:'));
    for (const fn of [stack.functions.relay, stack.functions.replay, stack.functions.console]) {
      expect(kms(fn)).toEqual([]);
    }
    // Every KMS statement names the secrets key and carries a condition on the encryption
    // context: the keyring's (epoch keys), or an endpoint's (values sealed before the keyring,
    // Decrypt only). GenerateDataKey only with the keyring's.
    const keyring = { StringEquals: { 'kms:EncryptionContext:tern:keyring': 'endpoint-secrets' } };
    const firstFormat = { Null: { 'kms:EncryptionContext:tern:tenant_id': 'false', 'kms:EncryptionContext:tern:endpoint_id': 'false' } };
    const kmsStatements = (fn: Parameters<typeof roleOf>[0]) =>
      statementsOfRole(roleOf(fn))
        .filter((st: any) => [st.Action].flat().some((a: string) => a.startsWith('kms:')))
        .map((st: any) => ({ actions: [st.Action].flat().sort(), resource: st.Resource, condition: st.Condition }));
    const key = arn(stack.storage.secretsKey);
    expect(kmsStatements(stack.functions.sender)).toEqual([
      { actions: ['kms:Decrypt'], resource: key, condition: keyring },
      { actions: ['kms:Decrypt'], resource: key, condition: firstFormat },
    ]);
    expect(kmsStatements(stack.functions.api)).toEqual([
      { actions: ['kms:Decrypt', 'kms:GenerateDataKey'], resource: key, condition: keyring },
      { actions: ['kms:Decrypt'], resource: key, condition: firstFormat },
    ]);
  });

  test('the secrets key: symmetric, rotation on, kept with the endpoints table, its ARN an output', () => {
    const key = json.Resources[logicalId(stack.storage.secretsKey)];
    expect(key.Type).toBe('AWS::KMS::Key');
    expect(key.Properties.EnableKeyRotation).toBe(true);
    expect(key.Properties.KeySpec ?? 'SYMMETRIC_DEFAULT').toBe('SYMMETRIC_DEFAULT');
    expect(key.DeletionPolicy).toBe(json.Resources[logicalId(stack.storage.endpoints)].DeletionPolicy);
    expect(json.Outputs!.SecretsKeyArn.Value).toEqual(arn(stack.storage.secretsKey));
    const sam = samTemplate();
    expect(sam.Resources.EndpointSecretsKey.Properties.EnableKeyRotation).toBe(true);
    expect(sam.Resources.EndpointSecretsKey.DeletionPolicy).toBe('Retain');
    expect(sam.Outputs!.SecretsKeyArn.Value).toEqual({ 'Fn::GetAtt': ['EndpointSecretsKey', 'Arn'] });
  });
});

describe('event source mappings', () => {
  test('relay: outbox stream, TRIM_HORIZON, bisect, bounded retries and age, OnFailure, partial batch, INSERT filter', () => {
    const es = settings.eventSources.relay;
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionName: ref(stack.functions.relay),
      EventSourceArn: arn(stack.storage.outbox, 'StreamArn'),
      StartingPosition: 'TRIM_HORIZON',
      BatchSize: es.batchSize,
      BisectBatchOnFunctionError: true,
      MaximumRetryAttempts: es.maximumRetryAttempts,
      MaximumRecordAgeInSeconds: es.maximumRecordAgeSeconds,
      ParallelizationFactor: stack.config.relayParallelizationFactor,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      DestinationConfig: { OnFailure: { Destination: arn(stack.queues.relayFailures) } },
      FilterCriteria: { Filters: [{ Pattern: JSON.stringify({ eventName: ['INSERT'] }) }] },
    });
    expect(es).toMatchObject({ startingPosition: 'TRIM_HORIZON', bisectBatchOnFunctionError: true, reportBatchItemFailures: true });
    expect(es.maximumRetryAttempts).toBeGreaterThanOrEqual(0);
    expect(es.maximumRecordAgeSeconds).toBeGreaterThan(0);
  });

  test('sender: delivery queue, batch <= 10, no batching window, partial batch, maximum concurrency from the target, reserved', () => {
    const es = settings.eventSources.sender;
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionName: ref(stack.functions.sender),
      EventSourceArn: arn(stack.queues.delivery),
      BatchSize: es.batchSize,
      MaximumBatchingWindowInSeconds: es.maximumBatchingWindowSeconds,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      ScalingConfig: { MaximumConcurrency: stack.config.capacity.senderMaxConcurrency },
    });
    expect(es.batchSize).toBeLessThanOrEqual(10);
    // The mapping's maximum, reserved, so the API and the portal cannot take it; no other function reserves.
    const reserved = Object.entries(json.Resources)
      .filter(([, r]) => r.Type === 'AWS::Lambda::Function' && r.Properties.ReservedConcurrentExecutions !== undefined)
      .map(([id, r]) => [id, r.Properties.ReservedConcurrentExecutions]);
    expect(reserved).toEqual([[stack.getLogicalId(stack.functions.sender.node.defaultChild as any), stack.config.capacity.senderMaxConcurrency]]);
  });

  test('both mappings report batch item failures, and there are only two', () => {
    const mappings = Object.values(json.Resources).filter((r) => r.Type === 'AWS::Lambda::EventSourceMapping');
    expect(mappings).toHaveLength(2);
    for (const m of mappings) expect(m.Properties.FunctionResponseTypes).toEqual(['ReportBatchItemFailures']);
  });
});

describe('alarms', () => {
  const alarmProps = (id: string) => resource(stack.alarms.node.findChild(id) as any).Properties;
  const topic = () => ref(stack.alarms.topic);
  const a = settings.alarms;

  test('seventeen alarms, each notifying the topic on alarm and on OK, missing data not breaching', () => {
    template.resourceCountIs('AWS::CloudWatch::Alarm', 17);
    for (const alarm of stack.alarms.alarms) {
      const p = resource(alarm).Properties;
      expect(p.AlarmActions).toEqual([topic()]);
      expect(p.OKActions).toEqual([topic()]);
      expect(p.TreatMissingData).toBe('notBreaching');
      expect(JSON.stringify(p.AlarmDescription)).toMatch(/\w/);
    }
  });

  test('every alarm description links to the dashboard (where the console widgets are)', () => {
    for (const alarm of stack.alarms.alarms) {
      const text = JSON.stringify(Stack.of(stack).resolve(resource(alarm).Properties.AlarmDescription));
      expect(text).toContain('.console.aws.amazon.com/cloudwatch/home?region=');
      expect(text).toContain('#dashboards:name=');
      expect(text).toContain(JSON.stringify({ Ref: logicalId(stack.dashboard.dashboard) }));
    }
  });

  test('DLQ depth: Maximum of ApproximateNumberOfMessagesVisible > 0', () => {
    expect(alarmProps('DlqDepth')).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: arn(stack.queues.dlq, 'QueueName') }],
      Statistic: 'Maximum',
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
    });
  });

  test('relay-failure queue depth > 0', () => {
    expect(alarmProps('RelayFailuresDepth')).toMatchObject({
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: arn(stack.queues.relayFailures, 'QueueName') }],
      Statistic: 'Maximum',
      Threshold: 0,
    });
  });

  test('delivery queue age of oldest message', () => {
    expect(alarmProps('DeliveryQueueOldestMessage')).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateAgeOfOldestMessage',
      Dimensions: [{ Name: 'QueueName', Value: arn(stack.queues.delivery, 'QueueName') }],
      Statistic: 'Maximum',
      Threshold: a.deliveryQueueOldestMessageSeconds,
      ComparisonOperator: 'GreaterThanThreshold',
    });
  });

  test('relay IteratorAge', () => {
    expect(alarmProps('RelayIteratorAge')).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: 'IteratorAge',
      Dimensions: [{ Name: 'FunctionName', Value: ref(stack.functions.relay) }],
      Statistic: 'Maximum',
      Threshold: a.relayIteratorAgeMs,
    });
    // Well below the 24 h stream retention.
    expect(a.relayIteratorAgeMs).toBeLessThan(24 * 3600 * 1000);
  });

  test.each([
    ['Relay', () => stack.functions.relay],
    ['Sender', () => stack.functions.sender],
    ['Replay', () => stack.functions.replay],
  ] as const)('%s errors and throttles > 0', (name, fn) => {
    for (const metric of ['Errors', 'Throttles']) {
      expect(alarmProps(`${name}${metric}`)).toMatchObject({
        Namespace: 'AWS/Lambda',
        MetricName: metric,
        Dimensions: [{ Name: 'FunctionName', Value: ref(fn()) }],
        Statistic: 'Sum',
        Threshold: 0,
        ComparisonOperator: 'GreaterThanThreshold',
      });
    }
  });

  test('failed delayed-delivery executions', () => {
    expect(alarmProps('DelayedDeliveryFailed')).toMatchObject({
      Namespace: 'AWS/States',
      MetricName: 'ExecutionsFailed',
      Dimensions: [{ Name: 'StateMachineArn', Value: ref(stack.delayedDelivery.stateMachine) }],
      Threshold: 0,
    });
  });

  test('relay misconfiguration: any RelayMisconfigured record in 5 min, namespace Tern, Service=tern', () => {
    expect(alarmProps('RelayMisconfigured')).toMatchObject({
      Namespace: 'Tern',
      MetricName: 'RelayMisconfigured',
      Dimensions: [{ Name: 'Service', Value: 'tern' }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
    });
  });

  test('lost markers: more than settings.json alarms.markersLost (0: any) MarkersLost in 5 min, namespace Tern, Service=tern', () => {
    expect(a.markersLost).toBe(0);
    expect(alarmProps('MarkersLost')).toMatchObject({
      Namespace: 'Tern',
      MetricName: 'MarkersLost',
      Dimensions: [{ Name: 'Service', Value: 'tern' }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: a.markersLost,
      ComparisonOperator: 'GreaterThanThreshold',
      TreatMissingData: 'notBreaching',
    });
  });

  test('put-backs: more than settings.json alarms.putBack PutBack in each of alarms.putBackPeriods 5-minute periods, namespace Tern, Service=tern', () => {
    expect([a.putBack, a.putBackPeriods]).toEqual([300, 3]);
    expect(alarmProps('PutBack')).toMatchObject({
      Namespace: 'Tern',
      MetricName: 'PutBack',
      Dimensions: [{ Name: 'Service', Value: 'tern' }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: a.putBack,
      EvaluationPeriods: a.putBackPeriods,
      DatapointsToAlarm: a.putBackPeriods,
      ComparisonOperator: 'GreaterThanThreshold',
      TreatMissingData: 'notBreaching',
      AlarmActions: [topic()],
    });
  });

  test('put-backs that failed: more than settings.json alarms.putBackFailed (0: any) PutBackFailed in 5 min, namespace Tern, Service=tern', () => {
    expect(a.putBackFailed).toBe(0);
    expect(alarmProps('PutBackFailed')).toMatchObject({
      Namespace: 'Tern',
      MetricName: 'PutBackFailed',
      Dimensions: [{ Name: 'Service', Value: 'tern' }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: a.putBackFailed,
      EvaluationPeriods: 1,
      ComparisonOperator: 'GreaterThanThreshold',
      TreatMissingData: 'notBreaching',
      AlarmActions: [topic()],
    });
  });

  test('the Tern API: more than settings.json alarms.api5xx (0: any) 5xx answers in 5 min, AWS/ApiGateway by ApiId', () => {
    expect(a.api5xx).toBe(0);
    expect(alarmProps('Api5xx')).toMatchObject({
      Namespace: 'AWS/ApiGateway',
      MetricName: '5xx',
      Dimensions: [{ Name: 'ApiId', Value: ref(stack.api.httpApi) }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: a.api5xx,
      ComparisonOperator: 'GreaterThanThreshold',
      EvaluationPeriods: 1,
      AlarmActions: [topic()],
    });
  });

  test('success rate below 95 % over 1 h: AttemptsSucceeded / Attempts in namespace Tern, Service=tern', () => {
    const p = alarmProps('SuccessRate');
    expect(p).toMatchObject({ Threshold: 95, ComparisonOperator: 'LessThanThreshold', EvaluationPeriods: 1 });
    const [expr, ...inputs] = p.Metrics;
    expect(expr).toMatchObject({ Expression: '100 * FILL(succeeded, 0) / attempts', ReturnData: true });
    const stat = (name: string) => ({
      Metric: { Namespace: 'Tern', MetricName: name, Dimensions: [{ Name: 'Service', Value: 'tern' }] },
      Period: 3600,
      Stat: 'Sum',
    });
    expect(inputs).toEqual([
      { Id: 'succeeded', MetricStat: stat('AttemptsSucceeded'), ReturnData: false },
      { Id: 'attempts', MetricStat: stat('Attempts'), ReturnData: false },
    ]);
    expect(a).toMatchObject({ successRatePercent: 95, successRatePeriodSeconds: 3600 });
  });

  test('topic: encrypted with a rotating key CloudWatch may use, TLS only, e-mail subscription', () => {
    const t = resource(stack.alarms.topic).Properties;
    const keyId = t.KmsMasterKeyId['Fn::GetAtt'][0];
    const key = json.Resources[keyId].Properties;
    expect(key.EnableKeyRotation).toBe(true);
    expect(key.KeyPolicy.Statement).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          Principal: { Service: 'cloudwatch.amazonaws.com' },
          Action: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        }),
      ]),
    );
    template.hasResourceProperties('AWS::SNS::TopicPolicy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } })]) },
    });
    template.hasResourceProperties('AWS::SNS::Subscription', { Protocol: 'email', Endpoint: 'ops@example.com', TopicArn: topic() });
  });
});

describe('dashboard', () => {
  const body = () => JSON.stringify(Stack.of(stack).resolve(only(json, 'AWS::CloudWatch::Dashboard').props.DashboardBody));

  test.each([
    ['success rate', '100 * FILL(succeeded, 0) / attempts'],
    ['latency p50', '"AttemptLatency","Service","tern",{"label":"p50","stat":"p50"'],
    ['latency p95', '"AttemptLatency","Service","tern",{"label":"p95","stat":"p95"'],
    ['retries', '"Retries"'],
    ['dead letters', '"DeadLetters"'],
    ['DLQ depth', '"ApproximateNumberOfMessagesVisible"'],
  ])('shows %s', (_what, needle) => {
    expect(body().replace(/\\"/g, '"')).toContain(needle);
  });

  test('the console widgets sit next to the DLQ graph and call the console function', () => {
    const widgets = dashboardWidgets(json, stack.getLogicalId(stack.functions.console.node.defaultChild as CfnElement));
    const dlqGraph = widgets.find((w) => w.properties.title === 'DLQ and relay-failure depth');
    const custom = widgets.filter((w) => w.type === 'custom');
    expect(custom.map((w) => w.properties.params.widget)).toEqual(['dead_letters', 'endpoints', 'waiting', 'event_lookup', 'audit']);
    for (const w of custom) expect(w.properties.endpoint).toBe('CONSOLE_ARN');
    const deadLetters = custom[0];
    expect(deadLetters.y).toBe(dlqGraph.y);
    expect(deadLetters.x).toBe(dlqGraph.x + dlqGraph.width);
  });
});

describe('outputs', () => {
  test('the outbox table name and ARN are exported for the application', () => {
    expect(json.Outputs!.OutboxTableName).toMatchObject({ Value: ref(stack.storage.outbox), Export: { Name: 'Tern-OutboxTableName' } });
    expect(json.Outputs!.OutboxTableArn).toMatchObject({ Value: arn(stack.storage.outbox), Export: { Name: 'Tern-OutboxTableArn' } });
  });

  test("ApiUrl: the HTTP API's base URL (no stage path, no trailing slash), exported for the application", () => {
    expect(json.Outputs!.ApiUrl).toMatchObject({
      Value: { 'Fn::GetAtt': [logicalId(stack.api.httpApi), 'ApiEndpoint'] },
      Export: { Name: 'Tern-ApiUrl' },
    });
  });

  test('the delivery queue ARN is an output (the destination of a console redrive)', () => {
    expect(json.Outputs!.DeliveryQueueArn).toMatchObject({ Value: arn(stack.queues.delivery) });
  });

  test.each(['DeliveryQueueUrl', 'DeliveryQueueArn', 'ConsoleFunctionName', 'DashboardUrl', 'DlqUrl', 'DlqArn', 'RelayFailureQueueUrl', 'DelayStateMachineArn', 'ReplayFunctionName', 'AlarmTopicArn', 'EndpointsTableName', 'AttemptsTableName'])(
    'output %s',
    (name) => {
      expect(json.Outputs![name]).toBeDefined();
    },
  );
});

describe('operational events', () => {
  test('topic: encrypted (AWS managed SNS key), TLS-only, output OperationalTopicArn', () => {
    const p = resource(stack.operational.topic).Properties;
    expect(JSON.stringify(p.KmsMasterKeyId)).toContain('alias/aws/sns');
    const policies = Object.values(json.Resources).filter(
      (r) => r.Type === 'AWS::SNS::TopicPolicy' && r.Properties.Topics.some((t: any) => t.Ref === logicalId(stack.operational.topic)),
    );
    expect(policies).toHaveLength(1);
    const denies = policies[0].Properties.PolicyDocument.Statement.filter(
      (st: any) => st.Effect === 'Deny' && String(st.Condition?.Bool?.['aws:SecureTransport']) === 'false',
    );
    expect(denies).toHaveLength(1);
    expect(json.Outputs!.OperationalTopicArn.Value).toEqual(ref(stack.operational.topic));
    expect(json.Outputs!.HealthTableName.Value).toEqual(ref(stack.storage.health));
  });

  test('Contributor Insights: failed attempts per endpoint and attempts per tenant, over the sender log group', () => {
    const senderLogs = stack.getLogicalId(stack.functions.logGroups.sender.node.defaultChild as CfnElement);
    const body = (rule: { node: { defaultChild?: unknown } } | any) => {
      const raw = json.Resources[stack.getLogicalId(rule as CfnElement)].Properties.RuleBody;
      const text = raw['Fn::Join']
        ? raw['Fn::Join'][1].map((x: any) => (typeof x === 'string' ? x : x.Ref === senderLogs ? 'SENDER_LOGS' : 'OTHER')).join('')
        : raw;
      return JSON.parse(text);
    };
    const attempt = { Match: '$.fields.message', In: ['attempt'] };
    expect(body(stack.insights.failingEndpoints)).toEqual({
      Schema: { Name: 'CloudWatchLogRule', Version: 1 },
      LogGroupNames: ['SENDER_LOGS'],
      LogFormat: 'JSON',
      Contribution: {
        Keys: ['$.fields.tenant_id', '$.fields.endpoint_id'],
        Filters: [attempt, { Match: '$.fields.outcome', NotIn: ['delivered'] }],
      },
      AggregateOn: 'Count',
    });
    expect(body(stack.insights.busiestTenants)).toEqual({
      Schema: { Name: 'CloudWatchLogRule', Version: 1 },
      LogGroupNames: ['SENDER_LOGS'],
      LogFormat: 'JSON',
      Contribution: { Keys: ['$.fields.tenant_id'], Filters: [attempt] },
      AggregateOn: 'Count',
    });
    for (const rule of [stack.insights.failingEndpoints, stack.insights.busiestTenants]) {
      expect(json.Resources[stack.getLogicalId(rule)].Properties.RuleState).toBe('ENABLED');
    }
  });

  test("the sender logs at INFO, so the rules see its attempt lines", () => {
    expect(resource(stack.functions.sender).Properties.Environment.Variables.RUST_LOG).toBe('info');
  });

  test('the dashboard shows both rules as Contributor Insights widgets', () => {
    const consoleId = logicalId(stack.functions.console);
    const widgets = dashboardWidgets(json, consoleId).filter((w: any) => w.properties.insightRule);
    expect(widgets.map((w: any) => w.properties.title)).toEqual([
      'Top endpoints by failed attempts (tenant, endpoint)',
      'Top tenants by attempts',
    ]);
    for (const w of widgets) expect(w.properties.insightRule).toMatchObject({ maxContributorCount: 10, orderBy: 'Sum' });
    const body = JSON.stringify(only(json, 'AWS::CloudWatch::Dashboard').props.DashboardBody);
    for (const rule of [stack.insights.failingEndpoints, stack.insights.busiestTenants]) {
      expect(body).toContain(JSON.stringify({ 'Fn::GetAtt': [stack.getLogicalId(rule), 'RuleName'] }));
    }
  });
});

describe('the Tern API (API Gateway HTTP API)', () => {
  const apiId = () => logicalId(stack.api.httpApi);
  const ofApi = (type: string) => Object.entries(json.Resources).filter(([, r]) => r.Type === type && r.Properties.ApiId?.Ref === apiId());

  test('one HTTP API', () => {
    template.resourceCountIs('AWS::ApiGatewayV2::Api', 1);
    expect(resource(stack.api.httpApi).Properties).toMatchObject({ ProtocolType: 'HTTP' });
  });

  test('every route uses AWS_IAM authorization but the portal pages\' (ANY /portal/{proxy+}, authenticated by the function)', () => {
    const routes = Object.values(json.Resources).filter((r) => r.Type === 'AWS::ApiGatewayV2::Route');
    expect(routes.map((r) => [r.Properties.RouteKey, r.Properties.AuthorizationType])).toEqual([
      ['ANY /{proxy+}', 'AWS_IAM'],
      [PORTAL_ROUTE_KEY, 'NONE'],
    ]);
    // No authorizer resource (IAM needs none) that a route could point at instead.
    template.resourceCountIs('AWS::ApiGatewayV2::Authorizer', 0);
  });

  test('the route goes to the api function by Lambda proxy, payload format 2.0 (what lambda_http reads)', () => {
    const [[integrationId, integration]] = ofApi('AWS::ApiGatewayV2::Integration');
    expect(integration.Properties).toMatchObject({
      IntegrationType: 'AWS_PROXY',
      IntegrationUri: arn(stack.functions.api),
      PayloadFormatVersion: '2.0',
    });
    // API Gateway's default and longest wait (30 s): no shorter timeout cuts the router's 25 s.
    expect(integration.Properties.TimeoutInMillis).toBeUndefined();
    for (const [, route] of ofApi('AWS::ApiGatewayV2::Route')) {
      expect(route.Properties.Target).toEqual({ 'Fn::Join': ['', ['integrations/', { Ref: integrationId }]] });
    }
  });

  test('only this API may invoke the api function, and only through its two routes', () => {
    const permissions = Object.values(json.Resources).filter(
      (r) => r.Type === 'AWS::Lambda::Permission' && JSON.stringify(r.Properties.FunctionName).includes(logicalId(stack.functions.api)),
    );
    expect(permissions).toHaveLength(2);
    const tails = permissions.map((permission) => {
      const p = permission.Properties;
      expect(p).toMatchObject({ Action: 'lambda:InvokeFunction', Principal: 'apigateway.amazonaws.com' });
      const [, parts] = p.SourceArn['Fn::Join'];
      expect(parts).toContainEqual({ Ref: apiId() });
      return parts[parts.length - 1];
    });
    expect(tails.sort()).toEqual(['/*/*/portal/{proxy+}', '/*/*/{proxy+}']);
  });

  test('one stage, $default, deployed automatically, throttled as the target decides (lib/capacity.ts)', () => {
    const stages = ofApi('AWS::ApiGatewayV2::Stage');
    expect(stages).toHaveLength(1);
    expect(stages[0][1].Properties).toMatchObject({
      StageName: '$default',
      AutoDeploy: true,
      DefaultRouteSettings: {
        ThrottlingRateLimit: stack.config.capacity.apiThrottlingRateLimit,
        ThrottlingBurstLimit: stack.config.capacity.apiThrottlingBurstLimit,
      },
    });
  });

  test('access log: one JSON line per request to its own log group with the retention of settings.json', () => {
    const [[, stage]] = ofApi('AWS::ApiGatewayV2::Stage');
    const log = stage.Properties.AccessLogSettings;
    expect(log.DestinationArn).toEqual(arn(stack.api.accessLogs));
    expect(resource(stack.api.accessLogs).Properties.RetentionInDays).toBe(settings.logs.retentionDays);
    expect(log.Format).toBe(API_ACCESS_LOG_FORMAT);
    const fields = JSON.parse(log.Format);
    // Who called (the IAM principal), what, how it ended, and why API Gateway refused or failed.
    expect(fields).toMatchObject({
      requestId: '$context.requestId',
      caller: '$context.identity.userArn',
      method: '$context.httpMethod',
      path: '$context.path',
      status: '$context.status',
      error: '$context.error.message',
      integrationError: '$context.integrationErrorMessage',
    });
  });
});
