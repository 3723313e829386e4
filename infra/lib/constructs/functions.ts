import * as path from 'path';
import { ArnFormat, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { RustFunction } from 'cargo-lambda-cdk';
import { Construct } from 'constructs';
import { TernConfig } from '../config';
import { TernSettings, WORKSPACE_DIR } from '../settings';
import { Portal } from './portal';
import { Queues } from './queues';
import { Storage } from './storage';

export interface FunctionsProps {
  readonly settings: TernSettings;
  readonly config: TernConfig;
  readonly storage: Storage;
  readonly queues: Queues;
  readonly stateMachine: sfn.IStateMachine;
  /** The operational-events topic the sender publishes endpoint health changes to. */
  readonly operationalTopic: sns.ITopic;
  /** The customer portal's table and key ring (read by the api function). */
  readonly portal: Portal;
}

/** The functions that export OpenTelemetry traces when `otlpEndpoint` is set (docs/tracing.md). */
export const TRACED_FUNCTIONS = ['relay', 'sender', 'replay', 'api'] as const;

/** The IAM action X-Ray's OTLP traces endpoint authorizes a span export as (SigV4-signed). */
export const XRAY_OTLP_ACTION = 'xray:PutTraceSegments';

/** The attributes of a fan-out record item (shared/tern-aws/src/fanout.rs: its ledger spread and checkpoint), the only ones the relay may touch in the attempts table. */
export const RELAY_CHECKPOINT_ATTRIBUTES = ['event_id', 'sk', 'fanout_through', 'fanout_shards', 'expires_at'];
/** The partition keys of the tenants' subscriptions-version items in the endpoints table (shared/tern-aws/src/endpoints.rs, SUBSCRIPTIONS_PARTITION_PREFIX), the only items the relay may GetItem there. */
export const SUBSCRIPTIONS_VERSION_KEYS = '#subscriptions#*';
/**
 * What an enable's reset (tern_aws::health, `reset`) puts back after deleting an endpoint's
 * health item, all it may update: the key (`endpoint_key`) and the tenant index's keys, the rate-limit schedule (`rt`), and the history
 * kept (24 h view buckets `h<n>`/`k<n>`, last success `ls`, bucket size `bs`, a pending
 * operational event `pe`/`pa`, the last failure `lf_*`). Patterns of `dynamodb:Attributes`
 * (ForAllValues:StringLike).
 */
export const HEALTH_RESET_ATTRIBUTES = ['endpoint_key', 'tenant_id', 'endpoint_id', 'rt', 'ls', 'bs', 'pe', 'pa', 'lf_*', 'h*', 'k*'];
/**
 * `actions` on the health table itself, not its tenant index: no function lists a
 * tenant's records (the operator's `tern endpoints health --tenant` does, with the
 * operator's credentials). `Table.grant` would add `index/*`.
 */
function grantHealthTable(fn: lambda.Function, storage: Storage, ...actions: string[]): void {
  fn.addToRolePolicy(new iam.PolicyStatement({ actions, resources: [storage.health.tableArn] }));
}

/** The dead-letter record's partition keys in the attempts table (`dl#<tenant id>#<shard>`, tern_aws::dead_letters). */
export const DEAD_LETTER_PARTITIONS = 'dl#*';

/**
 * The binaries of the Rust workspace (crates functions/relay, functions/sender, functions/replay,
 * functions/console, functions/api, and functions/relay-pg, deployed only with postgresOutbox).
 */
export type FunctionName = 'relay' | 'sender' | 'replay' | 'console' | 'api' | 'relay-pg';

interface FunctionSpec {
  readonly name: FunctionName;
  readonly description: string;
  readonly timeoutSeconds: number;
  readonly memoryMb: number;
  readonly environment: Record<string, string>;
  /** Concurrency reserved for the function (none when unset). */
  readonly reservedConcurrency?: number;
  /** Asynchronous invocations: retries after a function error (Lambda's default 2 when unset). */
  readonly retryAttempts?: number;
  /** Asynchronous invocations: the oldest event Lambda still runs, seconds (Lambda's default 6 h when unset). */
  readonly maxEventAgeSeconds?: number;
}

/**
 * relay, sender, replay, console and api: arm64 on provided.al2023, each with its own role
 * (no AWS managed policy: it may write only to its own log group) and its own
 * log group with a retention. Permissions are added with grants, action by action.
 */
export class Functions extends Construct {
  public readonly relay: lambda.Function;
  public readonly sender: lambda.Function;
  public readonly replay: lambda.Function;
  /** The operator's console: the dashboard's custom widgets (dead letters, endpoints, waiting, event lookup, audit). */
  public readonly console: lambda.Function;
  /** The Tern API (shared/tern-api's router through lambda_http), invoked by the HTTP API only. */
  public readonly api: lambda.Function;
  /** The PostgreSQL relay (postgresOutbox only): polls the tern_outbox table, invoked every minute. */
  public readonly relayPg?: lambda.Function;
  /** The relay-pg function's schedule (postgresOutbox only). */
  public readonly relayPgSchedule?: events.Rule;
  /** The execution role of each function (created here so that no AWS managed policy is attached). */
  public readonly roles: Record<FunctionName, iam.Role> = {} as Record<FunctionName, iam.Role>;
  /** The log group of each function (the Contributor Insights rules read the sender's). */
  public readonly logGroups: Record<FunctionName, logs.LogGroup> = {} as Record<FunctionName, logs.LogGroup>;

  constructor(scope: Construct, id: string, props: FunctionsProps) {
    super(scope, id);
    const { config: c, settings: s, storage, queues } = props;
    const common = {
      RUST_LOG: 'info',
      TERN_METRICS_NAMESPACE: s.metrics.namespace,
    };

    // OpenTelemetry traces (docs/tracing.md): off while the endpoint is empty (nothing is
    // built); parent-based, so an event whose writer sampled its trace is always traced.
    const tracingEnv = {
      OTEL_EXPORTER_OTLP_ENDPOINT: c.otlpEndpoint,
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: String(c.traceSampleRatio),
    };
    // The failure model's thresholds: the sender acts on them, the console shows their states.
    const healthEnv = {
      TERN_HEALTH_FAILURE_THRESHOLD: String(c.healthFailureThreshold),
      TERN_HEALTH_PROBE_INTERVAL_SECONDS: String(c.healthProbeIntervalSeconds),
      TERN_HEALTH_WINDOW_SECONDS: String(c.healthWindowSeconds),
      TERN_HEALTH_DISABLE_BELOW_PERCENT: String(c.healthDisableBelowPercent),
      TERN_HEALTH_DEGRADED_BELOW_PERCENT: String(c.healthDegradedBelowPercent),
      TERN_HEALTH_MIN_ATTEMPTS: String(c.healthMinAttempts),
      TERN_HEALTH_MAX_PAUSE_SECONDS: String(c.healthMaxPauseSeconds),
    };
    this.relay = this.rustFunction(c, {
      name: 'relay',
      description: 'Tern relay: outbox stream INSERTs to one delivery message per subscribed endpoint',
      timeoutSeconds: c.relayTimeoutSeconds,
      memoryMb: c.relayMemoryMb,
      environment: {
        ...common,
        ...tracingEnv,
        TERN_ENDPOINTS_TABLE: storage.endpoints.tableName,
        TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
        TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
        TERN_RELAY_FAILURE_QUEUE_URL: queues.relayFailures.queueUrl,
        TERN_MAX_PAYLOAD_BYTES: String(c.maxPayloadBytes),
        // A large fan-out's record outlives the ledger's items by 60 days.
        TERN_ATTEMPT_LOG_TTL_DAYS: String(c.attemptLogTtlDays),
      },
    });
    this.sender = this.rustFunction(c, {
      name: 'sender',
      description: 'Tern sender: signs and POSTs one delivery, then records, retries or dead-letters it',
      timeoutSeconds: c.senderTimeoutSeconds,
      memoryMb: c.senderMemoryMb,
      // Its mapping's maximum concurrency, reserved: the API, the portal and the other
      // functions cannot take it, and the mapping is never throttled (lib/capacity.ts).
      reservedConcurrency: c.senderReservedConcurrency,
      environment: {
        ...common,
        ...tracingEnv,
        TERN_ENDPOINTS_TABLE: storage.endpoints.tableName,
        TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
        TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
        TERN_DLQ_URL: queues.dlq.queueUrl,
        TERN_DELAY_STATE_MACHINE_ARN: props.stateMachine.stateMachineArn,
        TERN_RETRY_SCHEDULE: c.retrySchedule.join(','),
        TERN_ATTEMPT_TIMEOUT_MS: String(c.attemptTimeoutMs),
        TERN_RETRY_AFTER_CEILING_SECONDS: String(c.retryAfterCeilingSeconds),
        // Deployed stacks only ever deliver over https; plain http is for local mode.
        TERN_HTTPS_ONLY: 'true',
        // NAT64 addresses judged by their embedded IPv4 (IPv6-only / DNS64 subnets).
        TERN_NAT64: String(c.nat64),
        TERN_ATTEMPT_LOG_TTL_DAYS: String(c.attemptLogTtlDays),
        // Per-endpoint health: circuit breaker, auto-disable, operational events.
        TERN_HEALTH_TABLE: storage.health.tableName,
        ...healthEnv,
        TERN_OPERATIONAL_TOPIC_ARN: props.operationalTopic.topicArn,
        // Operational events are also written to the outbox as tern.endpoint.* events.
        TERN_OUTBOX_TABLE: storage.outbox.tableName,
        // Opens the endpoints' sealed secrets (kms:Decrypt of the keyring's epoch key, about once an hour).
        TERN_SECRETS_KEY_ID: storage.secretsKey.keyArn,
      },
    });
    this.replay = this.rustFunction(c, {
      name: 'replay',
      description: 'Tern replay: moves chosen dead letters back to the delivery queue (invoke by hand)',
      timeoutSeconds: c.replayTimeoutSeconds,
      memoryMb: c.replayMemoryMb,
      environment: {
        ...common,
        ...tracingEnv,
        TERN_DLQ_URL: queues.dlq.queueUrl,
        TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
        // The per-tenant dead-letter record: a tenant's dry run reads it, a replay removes
        // what it moved.
        TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
      },
    });

    this.console = this.rustFunction(c, {
      name: 'console',
      description: "Tern console: the dashboard's dead letters, endpoints, waiting, event lookup and audit widgets (replay, enable)",
      timeoutSeconds: s.functions.console.timeoutSeconds,
      memoryMb: s.functions.console.memoryMb,
      environment: {
        ...common,
        TERN_ENDPOINTS_TABLE: storage.endpoints.tableName,
        TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
        TERN_HEALTH_TABLE: storage.health.tableName,
        TERN_DLQ_URL: queues.dlq.queueUrl,
        TERN_REPLAY_FUNCTION: this.replay.functionName,
        // The "Is anything lost?" widget: the outbox (Scan), the relay-failure queue (read
        // whole), the delivery queue (counted) and the sender's schedule (when a retry is overdue).
        TERN_OUTBOX_TABLE: storage.outbox.tableName,
        TERN_RELAY_FAILURE_QUEUE_URL: queues.relayFailures.queueUrl,
        TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
        TERN_RETRY_SCHEDULE: c.retrySchedule.join(','),
        // The sender's thresholds, so the Endpoints widget names the states the sender acts on.
        ...healthEnv,
      },
    });

    // The variables shared/tern-api/src/aws.rs reads (the six names are required).
    this.api = this.rustFunction(c, {
      name: 'api',
      description: 'Tern API: endpoints, events, the delivery log and dead letters over HTTP, behind API Gateway with IAM authorization',
      timeoutSeconds: s.functions.api.timeoutSeconds,
      memoryMb: s.functions.api.memoryMb,
      environment: {
        RUST_LOG: 'info',
        ...tracingEnv,
        TERN_ENDPOINTS_TABLE: storage.endpoints.tableName,
        TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
        TERN_OUTBOX_TABLE: storage.outbox.tableName,
        TERN_HEALTH_TABLE: storage.health.tableName,
        TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
        TERN_DLQ_URL: queues.dlq.queueUrl,
        // Publish refuses what the relay would refuse.
        TERN_MAX_PAYLOAD_BYTES: String(c.maxPayloadBytes),
        // A test send's deadline (the API caps it at 10 s).
        TERN_ATTEMPT_TIMEOUT_MS: String(c.attemptTimeoutMs),
        // The sender's SSRF guard, applied when an endpoint is created or its URL changed.
        TERN_HTTPS_ONLY: 'true',
        TERN_NAT64: String(c.nat64),
        TERN_ATTEMPT_LOG_TTL_DAYS: String(c.attemptLogTtlDays),
        // A published event's outbox item expires like the application's own (settings.json delivery.outboxTtlDays).
        TERN_OUTBOX_TTL_DAYS: String(s.delivery.outboxTtlDays),
        // The health view names the states the sender acts on.
        ...healthEnv,
        // Seals the secrets it writes and opens the ones it reads back, under the keyring's epoch key
        // (kms:Decrypt about once an hour; kms:GenerateDataKey for a deployment's first epoch).
        TERN_SECRETS_KEY_ID: storage.secretsKey.keyArn,
        // The portal table, also where every POST's Idempotency-Key is recorded
        // (tern_api::idempotency); the customer portal (tern_api::portal): its key ring, who
        // may frame it, and its per-tenant rate limits (settings.json portal).
        TERN_PORTAL_TABLE: props.portal.table.tableName,
        TERN_PORTAL_KEY_SECRET: props.portal.keys.secretArn,
        TERN_PORTAL_FRAME_ANCESTORS: c.portalFrameAncestors,
        TERN_PORTAL_SESSIONS_PER_MINUTE: String(s.portal.sessionsPerMinute),
        TERN_PORTAL_TEST_SENDS_PER_MINUTE: String(s.portal.testSendsPerMinute),
      },
    });

    // Tracing on: the functions' spans reach X-Ray's OTLP traces endpoint
    // (https://xray.<region>.amazonaws.com/v1/traces) through the ADOT collector layer, whose
    // sigv4auth signs with the function's role. That endpoint authorizes a request as
    // xray:PutTraceSegments (X-Ray developer guide, "Setting up bearer token authentication for
    // traces"), an action with no resource-level permissions, so "*". Off: nothing granted.
    if (c.otlpEndpoint !== '') {
      for (const fn of TRACED_FUNCTIONS) {
        this.roles[fn].addToPolicy(
          new iam.PolicyStatement({ actions: [XRAY_OTLP_ACTION], resources: ['*'] }),
        );
      }
    }

    if (c.postgresOutbox) {
      const pg = s.postgresOutbox;
      this.relayPg = this.rustFunction(c, {
        name: 'relay-pg',
        description: 'Tern PostgreSQL relay: polls the tern_outbox table for a minute, one delivery message per subscribed endpoint',
        timeoutSeconds: pg.timeoutSeconds,
        memoryMb: pg.memoryMb,
        reservedConcurrency: pg.reservedConcurrency,
        environment: {
          ...common,
          ...tracingEnv,
          TERN_ENDPOINTS_TABLE: storage.endpoints.tableName,
          TERN_ATTEMPTS_TABLE: storage.attempts.tableName,
          TERN_DELIVERY_QUEUE_URL: queues.delivery.queueUrl,
          TERN_RELAY_FAILURE_QUEUE_URL: queues.relayFailures.queueUrl,
          TERN_MAX_PAYLOAD_BYTES: String(c.maxPayloadBytes),
          TERN_ATTEMPT_LOG_TTL_DAYS: String(c.attemptLogTtlDays),
          // A dynamic reference: CloudFormation reads the secret at deploy time with the
          // deployer's credentials, so the function needs no Secrets Manager permission and
          // no route to Secrets Manager from its subnets (docs/outbox.md says what it costs:
          // the URL shows in the function's configuration; rotation needs a redeploy).
          TERN_OUTBOX_DATABASE_URL: `{{resolve:secretsmanager:${c.postgresOutbox.secretArn}}}`,
          TERN_PG_RELAY_BATCH_ROWS: String(pg.batchRows),
          TERN_PG_RELAY_POLL_MS: String(pg.pollMs),
          TERN_OUTBOX_RETENTION_HOURS: String(pg.retentionHours),
        },
        // A run ends by itself; the next minute's run is its retry. A throttled invocation
        // (two runs still going) is dropped after a minute instead of piling up.
        retryAttempts: 0,
        maxEventAgeSeconds: 60,
      });
      const cfn = this.relayPg.node.defaultChild as lambda.CfnFunction;
      cfn.vpcConfig = { subnetIds: c.postgresOutbox.subnetIds, securityGroupIds: c.postgresOutbox.securityGroupIds };
      this.relayPgSchedule = new events.Rule(this, 'RelayPgSchedule', {
        description: 'Tern: starts the PostgreSQL relay every minute',
        schedule: events.Schedule.expression(pg.scheduleExpression),
        targets: [new eventTargets.LambdaFunction(this.relayPg)],
      });
      this.wireRelayPg(storage, queues, c.postgresOutbox.subnetIds, c.postgresOutbox.securityGroupIds);
    }
    this.wireRelay(s, c, storage, queues);
    this.wireSender(s, c, storage, queues, props.stateMachine, props.operationalTopic);
    // replay: reads the DLQ by hand (no mapping) and puts messages back on the delivery queue.
    queues.dlq.grant(this.replay, 'sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:ChangeMessageVisibility');
    queues.delivery.grant(this.replay, 'sqs:SendMessage');
    // The tenant's dead-letter record (DynamoLedger::dead_letters: a Query per shard, one
    // BatchGetItem of the pairs' states) and the removal of a replayed entry.
    this.grantDeadLetterRecord(this.replay, storage, { query: true, remove: true });
    this.wireConsole(storage, queues);
    this.wireApi(s, storage, queues, props.portal);
  }

  /**
   * The API's routes (shared/tern-api/src/routes) through the tern-aws adapters, action by action.
   * No Scan anywhere (every read is keyed by the path's tenant, endpoint or event), no index,
   * no write to the attempts table (resends and replays go through the delivery queue and the
   * sender records them), no sns, states or lambda action.
   */
  private wireApi(s: TernSettings, storage: Storage, queues: Queues, portal: Portal): void {
    // Endpoints (DynamoEndpointStore): GetItem reads one (every route under /endpoints/{id}
    // checks the tenant owns it); Query lists a tenant's (the list's pages, an event's
    // subscribers, the replay's target check); PutItem creates; UpdateItem is PATCH, enable,
    // disable and the secret's rotation; DeleteItem deletes. Create, PATCH and delete are one
    // TransactWriteItems with an UpdateItem of the tenant's subscriptions version (the
    // relay's cache): a transaction needs no action of its own.
    storage.endpoints.grant(
      this.api,
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
      'dynamodb:DeleteItem',
    );
    // Endpoint secrets at rest: the keyring's epoch keys (GenerateDataKey for the deployment's
    // first epoch, Decrypt once an hour per epoch), and Decrypt of values sealed before it.
    this.api.addToRolePolicy(this.keyringKeyUse(storage, ['kms:GenerateDataKey', 'kms:Decrypt']));
    this.api.addToRolePolicy(this.firstFormatDecrypt(storage));
    // Attempts (DynamoLedger): Query only, on the table (not storage.attempts.grant, which adds
    // `index/*`): an event's attempts (history), its pair states (the event view, resend,
    // recover) and an endpoint's log (the delivery log, recover).
    this.api.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: [storage.attempts.tableArn] }),
    );
    // An endpoint's health counts its waiting deliveries: a Query of the waiting index, by
    // name (the endpoint's partition, `<tenant>#<endpoint>`); no Scan.
    this.api.addToRolePolicy(new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: [storage.waitingIndexArn] }));
    // The tenant's dead-letter record: lists and dry runs read it, a replay removes what it moved.
    this.grantDeadLetterRecord(this.api, storage, { query: false, remove: true });
    // Outbox (DynamoEventStore): PutItem is publish (conditional on a new event id; a repeat
    // reads the existing item back from the refused write); GetItem reads an event (the event
    // view, its attempts, resend, recover).
    storage.outbox.grant(this.api, 'dynamodb:PutItem', 'dynamodb:GetItem');
    // Health (DynamoHealthStore): GetItem is the health view; enable's reset (the circuit
    // starts closed, the history kept), as the console's Enable does.
    grantHealthTable(this.api, storage, 'dynamodb:GetItem');
    this.grantHealthReset(this.api, storage);
    // Resend and recover put a message on the delivery queue; a replay moves dead letters
    // there (SendMessageBatch is authorized by sqs:SendMessage).
    queues.delivery.grant(this.api, 'sqs:SendMessage');
    // The tenant's dead letters: ReceiveMessage and ChangeMessageVisibility read them and let
    // them go again (the grouped view, the replay's check); DeleteMessage removes the ones a
    // replay moved back to the delivery queue (the replay function's three actions).
    queues.dlq.grant(this.api, 'sqs:ReceiveMessage', 'sqs:ChangeMessageVisibility', 'sqs:DeleteMessage');
    // The portal table. The customer portal (DynamoPortalLedger): PutItem records a link's one
    // use (conditional); UpdateItem counts a rate-limit window (conditional ADD). Idempotency-Key
    // records (DynamoIdempotencyStore, `idem#...`): PutItem claims a key and keeps its answer,
    // UpdateItem lets it go after a 5xx (each conditional). No read: a refused claim returns
    // the record it met (ReturnValuesOnConditionCheckFailure), the others answer by their condition.
    portal.table.grant(this.api, 'dynamodb:PutItem', 'dynamodb:UpdateItem');
    // Its key ring (SecretsManagerKeys): GetSecretValue only; rotation is an operator's act.
    this.api.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['secretsmanager:GetSecretValue'], resources: [portal.keys.secretArn] }),
    );
    // A test send to an endpoint with a client certificate offers it, read as the sender reads it.
    this.api.addToRolePolicy(this.clientCertificateRead(s));
  }

  /**
   * The per-tenant dead-letter record in the attempts table (tern_aws::dead_letters): Query
   * reads a tenant's 32 shards (granted with the attempt log), BatchGetItem the pairs' state
   * items (to drop entries a later budget claimed), and with `remove` a DeleteItem of a
   * replayed entry, only on the record's partitions (`dl#<tenant>#<shard>`).
   */
  /**
   * An enable's reset of a health item (tern_aws::health, `reset`): DeleteItem of the item,
   * then UpdateItems that put back a rate-limit schedule that lies ahead (deliveries holding
   * its slots may still be on the queue) and the history kept; only those attributes
   * ({@link HEALTH_RESET_ATTRIBUTES}), nothing returned.
   */
  private grantHealthReset(fn: lambda.Function, storage: Storage): void {
    grantHealthTable(fn, storage, 'dynamodb:DeleteItem');
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:UpdateItem'],
        resources: [storage.health.tableArn],
        conditions: {
          'ForAllValues:StringLike': { 'dynamodb:Attributes': HEALTH_RESET_ATTRIBUTES },
          StringEqualsIfExists: { 'dynamodb:ReturnValues': 'NONE' },
        },
      }),
    );
  }

  private grantDeadLetterRecord(fn: lambda.Function, storage: Storage, how: { query: boolean; remove: boolean }): void {
    // Query comes with the attempt log for the console and the api.
    const actions = how.query ? ['dynamodb:Query', 'dynamodb:BatchGetItem'] : ['dynamodb:BatchGetItem'];
    fn.addToRolePolicy(new iam.PolicyStatement({ actions, resources: [storage.attempts.tableArn] }));
    const remove = how.remove;
    if (remove) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['dynamodb:DeleteItem'],
          resources: [storage.attempts.tableArn],
          conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [DEAD_LETTER_PARTITIONS] } },
        }),
      );
    }
  }

  /**
   * The console may only read (the DLQ without deleting: receive, then release with
   * ChangeMessageVisibility; endpoints; the attempt log), invoke the replay function and
   * enable endpoints (UpdateItem, and the reset of the endpoint's health record:
   * DeleteItem, then UpdateItems of its rate-limit schedule and kept history alone). No sqs:DeleteMessage,
   * no sqs:SendMessage, no PutItem.
   */
  private wireConsole(storage: Storage, queues: Queues): void {
    queues.dlq.grant(this.console, 'sqs:ReceiveMessage', 'sqs:ChangeMessageVisibility');
    // Scan lists every endpoint (the Endpoints widget); UpdateItem is Enable.
    storage.endpoints.grant(this.console, 'dynamodb:Scan', 'dynamodb:UpdateItem');
    // The attempt log (Query by event), and the waiting index (Waiting and Endpoints widgets:
    // a Scan of the sparse index reads only waiting deliveries). Named ARNs, not
    // storage.attempts.grant, which adds every index (`index/*`).
    this.console.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: [storage.attempts.tableArn] }),
    );
    this.console.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['dynamodb:Query', 'dynamodb:Scan'], resources: [storage.waitingIndexArn] }),
    );
    // The dead letters widget reads the per-tenant record (its pairs' states in one
    // BatchGetItem); it removes nothing (a replay is the replay function's).
    this.grantDeadLetterRecord(this.console, storage, { query: false, remove: false });
    // Health: read; Enable resets the endpoint's record so it starts with a closed circuit.
    grantHealthTable(this.console, storage, 'dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan');
    this.grantHealthReset(this.console, storage);
    // The unqualified function only (grantInvoke would add every version and alias, `:*`).
    this.console.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [this.replay.functionArn] }),
    );    // The "Is anything lost?" widget: the outbox's events of the window (a Scan of the table,
    // no index), the relay-failure queue read as the DLQ is (received, then released), the
    // delivery queue only counted (GetQueueAttributes).
    this.console.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['dynamodb:Scan'], resources: [storage.outbox.tableArn] }),
    );
    queues.relayFailures.grant(this.console, 'sqs:ReceiveMessage', 'sqs:ChangeMessageVisibility');
    queues.delivery.grant(this.console, 'sqs:GetQueueAttributes');
  }

  /**
   * The PostgreSQL relay: the stream relay's grants minus the stream (no mapping), plus what
   * Lambda needs for its network interfaces in the database's VPC (the actions of
   * AWSLambdaVPCAccessExecutionRole, inline and scoped like the static egress's). No Secrets
   * Manager action: the connection URL arrives resolved in its environment.
   */
  private wireRelayPg(storage: Storage, queues: Queues, subnetIds: string[], securityGroupIds: string[]): void {
    const fn = this.relayPg!;
    this.grantFanOut(fn, storage, queues);
    const stack = Stack.of(this);
    const eni = stack.formatArn({ service: 'ec2', resource: 'network-interface', resourceName: '*' });
    // Describe actions have no resource-level permissions (Lambda developer guide, VPC access).
    fn.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets'], resources: ['*'] }),
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CreateNetworkInterface'],
        resources: [
          eni,
          ...subnetIds.map((id) => stack.formatArn({ service: 'ec2', resource: 'subnet', resourceName: id })),
          ...securityGroupIds.map((id) => stack.formatArn({ service: 'ec2', resource: 'security-group', resourceName: id })),
        ],
      }),
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'],
        resources: [eni],
      }),
    );
  }

  /**
   * What a relay's fan-out calls (tern_aws::wiring::relay_deps): subscriptions, fan-out
   * checkpoints, the delivery queue and the relay-failure queue. Shared by the stream relay
   * and the PostgreSQL relay, so that the two can never differ.
   */
  private grantFanOut(fn: lambda.Function, storage: Storage, queues: Queues): void {
    storage.endpoints.grant(fn, 'dynamodb:Query');
    // Each tenant's subscriptions version (shared/tern-aws/src/endpoints.rs): one GetItem per
    // tenant per batch tells a warm relay whether the list it keeps is current. Only those
    // items, under partitions no tenant can name.
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem'],
        resources: [storage.endpoints.tableArn],
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [SUBSCRIPTIONS_VERSION_KEYS] } },
      }),
    );
    // Fan-out checkpoints (shared/tern-aws/src/fanout.rs): one item per event in the
    // attempts table, read and written whole. Only its attributes, so the relay can
    // neither read the attempt log nor write a delivery's state.
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:GetItem', 'dynamodb:PutItem'],
        resources: [storage.attempts.tableArn],
        conditions: {
          'ForAllValues:StringEquals': { 'dynamodb:Attributes': RELAY_CHECKPOINT_ATTRIBUTES },
          StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
        },
      }),
    );
    queues.delivery.grant(fn, 'sqs:SendMessage');
    // The relay also writes records it rejects (too big, unparseable) there itself.
    queues.relayFailures.grant(fn, 'sqs:SendMessage');
  }

  private wireRelay(s: TernSettings, c: TernConfig, storage: Storage, queues: Queues): void {
    const es = s.eventSources.relay;
    // The mapping grants the stream reads (and sqs:SendMessage on its OnFailure queue).
    this.relay.addEventSource(
      new sources.DynamoEventSource(storage.outbox, {
        startingPosition: lambda.StartingPosition[es.startingPosition],
        batchSize: c.relayBatchSize,
        bisectBatchOnError: es.bisectBatchOnFunctionError,
        retryAttempts: es.maximumRetryAttempts,
        maxRecordAge: Duration.seconds(es.maximumRecordAgeSeconds),
        // Derived from the target (lib/capacity.ts): concurrent batches per stream shard.
        parallelizationFactor: c.relayParallelizationFactor,
        reportBatchItemFailures: es.reportBatchItemFailures,
        // Records that still fail after the retries leave the shard for this queue instead of blocking it.
        onFailure: new sources.SqsDlq(queues.relayFailures),
        // Only INSERTs are outbox items to relay (the code checks eventName too).
        filters: [{ pattern: JSON.stringify(es.filterPattern) }],
      }),
    );
    this.grantFanOut(this.relay, storage, queues);
  }

  private wireSender(
    s: TernSettings,
    c: TernConfig,
    storage: Storage,
    queues: Queues,
    stateMachine: sfn.IStateMachine,
    operationalTopic: sns.ITopic,
  ): void {
    const es = s.eventSources.sender;
    // The mapping grants receive/delete/change-visibility on the delivery queue.
    this.sender.addEventSource(
      new sources.SqsEventSource(queues.delivery, {
        batchSize: c.senderBatchSize,
        maxBatchingWindow: Duration.seconds(es.maximumBatchingWindowSeconds),
        maxConcurrency: c.senderMaxConcurrency,
        // Without this the batchItemFailures in the sender's response are ignored.
        reportBatchItemFailures: es.reportBatchItemFailures,
      }),
    );
    // PutItem/UpdateItem: the sender disables an endpoint after 410 Gone.
    storage.endpoints.grant(this.sender, 'dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem', 'dynamodb:PutItem');
    // The table only: the sender writes its items (which keeps the waiting index current)
    // and never reads the index (storage.attempts.grant would add `index/*`).
    this.sender.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:Query'],
        resources: [storage.attempts.tableArn],
      }),
    );
    // Retries up to 900 s go back on the delivery queue with DelaySeconds; dead letters go to the DLQ.
    queues.delivery.grant(this.sender, 'sqs:SendMessage');
    queues.dlq.grant(this.sender, 'sqs:SendMessage');
    // A failed message whose put-back SQS did not take is hidden for the put-back's short
    // delay (ChangeMessageVisibility, the batch call too): the sender's own call, granted
    // here whatever the mapping's consume grant holds.
    queues.delivery.grant(this.sender, 'sqs:ChangeMessageVisibility');
    stateMachine.grantStartExecution(this.sender);
    // One health item per endpoint: read, created, updated atomically (counters, circuit, probe claim).
    grantHealthTable(this.sender, storage, 'dynamodb:GetItem', 'dynamodb:UpdateItem');
    // Operational events: the SNS topic, and the outbox as tern.endpoint.* events (conditional PutItem only).
    // sns:Publish alone: the topic uses the AWS managed SNS key, whose key policy already lets the
    // account's principals encrypt through SNS (grantPublish would add kms:* on key/*).
    this.sender.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['sns:Publish'], resources: [operationalTopic.topicArn] }),
    );
    storage.outbox.grant(this.sender, 'dynamodb:PutItem');
    // Endpoint secrets at rest: the sender only opens them (it never writes a secret).
    this.sender.addToRolePolicy(this.keyringKeyUse(storage, ['kms:Decrypt']));
    this.sender.addToRolePolicy(this.firstFormatDecrypt(storage));
    this.sender.addToRolePolicy(this.clientCertificateRead(s));
  }

  /**
   * Endpoint secrets at rest (docs/security.md): the keyring's epoch keys, which KMS makes and
   * unwraps only with the keyring's encryption context ({"tern:keyring": "endpoint-secrets",
   * "tern:epoch": n}). GenerateDataKey is allowed with that context alone, so no function can
   * make a key for anything else.
   */
  private keyringKeyUse(storage: Storage, actions: string[]): iam.PolicyStatement {
    return new iam.PolicyStatement({
      actions,
      resources: [storage.secretsKey.keyArn],
      conditions: { StringEquals: { 'kms:EncryptionContext:tern:keyring': 'endpoint-secrets' } },
    });
  }

  /**
   * Values sealed before the keyring (format tern1, a data key each, bound to its endpoint):
   * Decrypt only, and only with an endpoint's encryption context (tenant and endpoint).
   * `tern endpoints encrypt-secrets` re-seals them; the statement can go once none is left.
   */
  private firstFormatDecrypt(storage: Storage): iam.PolicyStatement {
    return new iam.PolicyStatement({
      actions: ['kms:Decrypt'],
      resources: [storage.secretsKey.keyArn],
      conditions: { Null: { 'kms:EncryptionContext:tern:tenant_id': 'false', 'kms:EncryptionContext:tern:endpoint_id': 'false' } },
    });
  }

  /**
   * Mutual TLS: client certificates live in Secrets Manager under settings.json's
   * delivery.mtlsSecretPrefix (tern/mtls/; an endpoint can name only its own tenant's
   * tern/mtls/<tenant id>/, checked by the code when set and before each read). The sender
   * and the api function (its test sends) read them. The trailing wildcard covers the six
   * characters Secrets Manager appends to each ARN.
   */
  private clientCertificateRead(s: TernSettings): iam.PolicyStatement {
    return new iam.PolicyStatement({
      actions: ['secretsmanager:GetSecretValue'],
      resources: [Stack.of(this).formatArn({ service: 'secretsmanager', resource: 'secret', resourceName: `${s.delivery.mtlsSecretPrefix}*`, arnFormat: ArnFormat.COLON_RESOURCE_NAME })],
    });
  }

  private rustFunction(c: TernConfig, spec: FunctionSpec): lambda.Function {
    // relay-pg -> RelayPg
    const id = spec.name.split('-').map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join('');
    const logGroup = new logs.LogGroup(this, `${id}Logs`, {
      retention: retentionDays(c.logRetentionDays),
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const role = new iam.Role(this, `${id}Role`, {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `Tern ${spec.name} function`,
    });
    logGroup.grantWrite(role);
    this.roles[spec.name] = role;
    this.logGroups[spec.name] = logGroup;
    const options: lambda.FunctionOptions = {
      description: spec.description,
      architecture: lambda.Architecture.ARM_64,
      timeout: Duration.seconds(spec.timeoutSeconds),
      memorySize: spec.memoryMb,
      environment: spec.environment,
      reservedConcurrentExecutions: spec.reservedConcurrency,
      retryAttempts: spec.retryAttempts,
      maxEventAge: spec.maxEventAgeSeconds === undefined ? undefined : Duration.seconds(spec.maxEventAgeSeconds),
      role,
      logGroup,
    };
    if (c.prebuiltArtifactsDir) {
      // `cargo lambda build --release --arm64` already ran: ship target/lambda/<bin>/ as is.
      return new lambda.Function(this, id, {
        ...options,
        runtime: lambda.Runtime.PROVIDED_AL2023,
        handler: 'bootstrap',
        code: lambda.Code.fromAsset(path.resolve(c.prebuiltArtifactsDir, spec.name)),
      });
    }
    // RustFunction runs `cargo lambda build --release --arm64 --bin <name>` in the workspace at synth time
    // (or in Docker when cargo-lambda is missing); it is skipped when bundling is off for the stack.
    return new RustFunction(this, id, {
      ...options,
      manifestPath: path.join(WORKSPACE_DIR, 'Cargo.toml'),
      binaryName: spec.name,
      runtime: 'provided.al2023',
    });
  }
}

/** CloudWatch Logs accepts only some retention values. */
export function retentionDays(days: number): logs.RetentionDays {
  const allowed = Object.values(logs.RetentionDays).filter((v): v is number => typeof v === 'number');
  if (!allowed.includes(days)) {
    throw new Error(`logRetentionDays must be one of ${allowed.join(', ')}; got ${days}`);
  }
  return days as logs.RetentionDays;
}
