/**
 * The settings a user may change, and how they are resolved:
 * stack prop > CDK context (`-c tern:<name>=<value>` or cdk.json) > infra/settings.json.
 */
import { Node } from 'constructs';
import {
  API_MAX_BURST,
  API_MAX_RATE,
  CapacityPlan,
  DEFAULT_ACCOUNT_CONCURRENCY,
  deriveCapacity,
  ESM_MAX_CONCURRENCY,
  ESM_MIN_CONCURRENCY,
  UNRESERVED_CONCURRENCY_MINIMUM,
} from './capacity';
import { EgressMode, MAX_EGRESS_AVAILABILITY_ZONES, TableCapacityMode, TernSettings } from './settings';

/**
 * The tunable settings of a Tern stack. Every one is optional; the default
 * comes from infra/settings.json unless noted. Each can also be given as CDK
 * context `tern:<name>` (for example `cdk deploy -c tern:senderMaxConcurrency=50`).
 */
export interface TernOptions {
  /** E-mail address subscribed to the alarm topic. Default: no subscription (subscribe later). */
  readonly alarmEmail?: string;
  /** Delay before each retry, in seconds, first retry first (context: comma-separated). Default: delivery.retrySchedule. */
  readonly retrySchedule?: number[];
  /** Deadline of one HTTP delivery attempt, milliseconds. Must be at most half the sender timeout. Default: delivery.attemptTimeoutMs. */
  readonly attemptTimeoutMs?: number;
  /** Longest wait a receiver's Retry-After may ask for, seconds. Default: delivery.retryAfterCeilingSeconds. */
  readonly retryAfterCeilingSeconds?: number;
  /** Days an attempt record is kept before DynamoDB TTL removes it. Default: delivery.attemptLogTtlDays. */
  readonly attemptLogTtlDays?: number;
  /** Largest outbox payload the relay accepts, bytes. Default: delivery.maxPayloadBytes. */
  readonly maxPayloadBytes?: number;
  /**
   * Deliver to receivers whose names resolve to NAT64 addresses (64:ff9b::/96) by judging the
   * IPv4 each embeds, for a sender in an IPv6-only or DNS64 subnet; private and metadata IPv4s
   * stay blocked in that form. Default: delivery.nat64 (false).
   */
  readonly nat64?: boolean;
  /** Relay function timeout, seconds. Default: functions.relay.timeoutSeconds. */
  readonly relayTimeoutSeconds?: number;
  /** Sender function timeout, seconds. The delivery queue's visibility timeout must stay >= 6x this. Default: functions.sender.timeoutSeconds. */
  readonly senderTimeoutSeconds?: number;
  /** Replay function timeout, seconds; must stay below 330 (the replay's DLQ drain visibility). Default: functions.replay.timeoutSeconds. */
  readonly replayTimeoutSeconds?: number;
  /** Relay function memory, MB. Default: functions.relay.memoryMb. */
  readonly relayMemoryMb?: number;
  /** Sender function memory, MB. Default: functions.sender.memoryMb. */
  readonly senderMemoryMb?: number;
  /** Replay function memory, MB. Default: functions.replay.memoryMb. */
  readonly replayMemoryMb?: number;
  /** Stream records per relay invocation (1-10000). Default: eventSources.relay.batchSize. */
  readonly relayBatchSize?: number;
  /** Messages per sender invocation (1-10). Default: eventSources.sender.batchSize. */
  readonly senderBatchSize?: number;
  /**
   * Deliveries per second the deployment must carry: sizes the sender's maximum and reserved
   * concurrency, the relay's parallelization factor, the API stage's throttling and the
   * provisioned maxima (lib/capacity.ts, docs/capacity.md). Default: capacity.targetDeliveriesPerSecond (2,000).
   */
  readonly targetDeliveriesPerSecond?: number;
  /**
   * Reserve the sender's concurrency (its maximum concurrency) so the API, the portal and the
   * other functions cannot take it. Turn off for an account whose Lambda concurrency quota is
   * too low to reserve it (new accounts get less than 1,000). Default: capacity.reserveSenderConcurrency (true).
   */
  readonly reserveSenderConcurrency?: boolean;
  /**
   * The account's Lambda concurrency quota in the stack's Region: the synth refuses a reserved
   * concurrency that would leave less than 100 of it unreserved (Lambda's rule). Default: 1,000 (AWS's default).
   */
  readonly lambdaConcurrencyQuota?: number;
  /** Most concurrent sender invocations the SQS mapping starts (2-1000). Default: derived from targetDeliveriesPerSecond. */
  readonly senderMaxConcurrency?: number;
  /** Receives of one delivery message before SQS moves it to the DLQ (crashes, poison messages). Default: queues.delivery.maxReceiveCount. */
  readonly maxReceiveCount?: number;
  /**
   * Delivery queue visibility timeout, seconds. Default: the larger of
   * queues.delivery.visibilityTimeoutSeconds and 6x the sender timeout plus the batching window.
   * An explicit value below that minimum is rejected.
   */
  readonly deliveryVisibilityTimeoutSeconds?: number;
  /** Retention of every log group (functions), days; must be a CloudWatch Logs retention value. Default: logs.retentionDays. */
  readonly logRetentionDays?: number;
  /** Keep the three tables when the stack is deleted or a table is replaced. Default: true. */
  readonly retainData?: boolean;
  /**
   * DynamoDB capacity of the three tables: `on-demand` (pay per request) or `provisioned` (capacity
   * units with auto scaling in the ranges of capacity.tables, for steady high volume). Default: capacity.mode.
   */
  readonly tableCapacityMode?: TableCapacityMode;
  /** Consecutive failed attempts that open an endpoint's circuit (1-1000). Default: health.failureThreshold. */
  readonly healthFailureThreshold?: number;
  /** Seconds between probes of an open endpoint (1-3600). Default: health.probeIntervalSeconds. */
  readonly healthProbeIntervalSeconds?: number;
  /** Rolling window of an endpoint's success rate, seconds (60-86400). Default: health.windowSeconds. */
  readonly healthWindowSeconds?: number;
  /** Disable an endpoint below this success rate over the window, percent (0-100, below healthDegradedBelowPercent). Default: health.disableBelowPercent. */
  readonly healthDisableBelowPercent?: number;
  /** Report an endpoint degraded below this success rate over the window, percent (0-100). Default: health.degradedBelowPercent. */
  readonly healthDegradedBelowPercent?: number;
  /** Fewest attempts in the window before the rate can disable an endpoint (1-100000). Default: health.minAttempts. */
  readonly healthMinAttempts?: number;
  /** Longest pause a receiver's backpressure (429, or 503 with Retry-After) puts on its endpoint, seconds (1-86400). Default: health.maxPauseSeconds. */
  readonly healthMaxPauseSeconds?: number;
  /**
   * Steady-state requests per second the Tern API's stage accepts (1-10000, API Gateway's account
   * quota per Region); above it and the burst, API Gateway answers 429. Default: api.throttlingRateLimit.
   */
  readonly apiThrottlingRateLimit?: number;
  /** Requests the Tern API's stage accepts at once above the rate (1-5000, API Gateway's account burst quota). Default: api.throttlingBurstLimit. */
  readonly apiThrottlingBurstLimit?: number;
  /**
   * Origins allowed to show the customer portal in an iframe (the CSP's frame-ancestors),
   * comma-separated `https://host[:port]`, e.g. `https://app.example.com`. Default: none.
   */
  readonly portalFrameAncestors?: string;
  /**
   * Where the sender and the api function send from: `shared` (outside a VPC, AWS's shared
   * Lambda address ranges) or `static` (private subnets behind one NAT gateway with an Elastic
   * IP per availability zone: the EgressIps output). Default: egress.mode.
   */
  readonly egress?: EgressMode;
  /** Availability zones of the static egress (1-3), so NAT gateways and Elastic IPs. Default: egress.availabilityZones. */
  readonly egressAvailabilityZones?: number;
  /**
   * OTLP/HTTP endpoint the relay, sender, replay and API functions export their traces to
   * (OTEL_EXPORTER_OTLP_ENDPOINT; `/v1/traces` is appended): the ADOT collector layer's
   * `http://localhost:4318`, or an OpenTelemetry backend's. Empty: tracing off, nothing built
   * (docs/tracing.md). Default: empty.
   */
  readonly otlpEndpoint?: string;
  /**
   * Share of new traces recorded, 0..1 (OTEL_TRACES_SAMPLER_ARG of `parentbased_traceidratio`):
   * an event whose writer sent a sampled traceparent is always traced, one without is at this
   * ratio. Default: 0.05.
   */
  readonly traceSampleRatio?: number;
  /**
   * Deploy the PostgreSQL relay (relay-pg, issue 31): a function in the database's VPC, invoked
   * every minute, polling the `tern_outbox` table (docs/outbox.md). Needs the three
   * postgresOutbox* settings below. Default: postgresOutbox.enabled (false).
   */
  readonly postgresOutbox?: boolean;
  /**
   * ARN of the Secrets Manager secret whose SecretString is the database's connection URL
   * (`postgres://user:password@host:5432/db?sslmode=require`); CloudFormation resolves it into
   * TERN_OUTBOX_DATABASE_URL at deploy time (a dynamic reference).
   */
  readonly postgresOutboxSecretArn?: string;
  /** Private subnets the relay runs in (comma-separated `subnet-...`): they must reach the database, SQS and DynamoDB. */
  readonly postgresOutboxSubnetIds?: string;
  /** Security groups of the relay (comma-separated `sg-...`): the database's (or RDS Proxy's) must admit them on 5432. */
  readonly postgresOutboxSecurityGroupIds?: string;
  /**
   * Folder of prebuilt functions laid out as `cargo lambda build --release --arm64` writes them
   * (`<dir>/relay/bootstrap`, ...), usually `../target/lambda`. When set, the stack uses these files
   * and does not run cargo-lambda. Default: unset, so `RustFunction` builds each binary at synth.
   */
  readonly prebuiltArtifactsDir?: string;
}

/** Every option with its value resolved. */
export interface TernConfig {
  readonly alarmEmail?: string;
  readonly retrySchedule: number[];
  readonly attemptTimeoutMs: number;
  readonly retryAfterCeilingSeconds: number;
  readonly attemptLogTtlDays: number;
  readonly maxPayloadBytes: number;
  readonly nat64: boolean;
  readonly relayTimeoutSeconds: number;
  readonly senderTimeoutSeconds: number;
  readonly replayTimeoutSeconds: number;
  readonly relayMemoryMb: number;
  readonly senderMemoryMb: number;
  readonly replayMemoryMb: number;
  readonly relayBatchSize: number;
  readonly senderBatchSize: number;
  readonly senderMaxConcurrency: number;
  /** The sender's reserved concurrency; `undefined`: none (reserveSenderConcurrency false). */
  readonly senderReservedConcurrency?: number;
  /** The relay stream mapping's ParallelizationFactor (derived from the target). */
  readonly relayParallelizationFactor: number;
  /** What the target decides (lib/capacity.ts): the provisioned maxima are read from here. */
  readonly capacity: CapacityPlan;
  readonly lambdaConcurrencyQuota: number;
  readonly maxReceiveCount: number;
  readonly deliveryVisibilityTimeoutSeconds: number;
  readonly logRetentionDays: number;
  readonly retainData: boolean;
  readonly tableCapacityMode: TableCapacityMode;
  readonly healthFailureThreshold: number;
  readonly healthProbeIntervalSeconds: number;
  readonly healthWindowSeconds: number;
  readonly healthDisableBelowPercent: number;
  readonly healthDegradedBelowPercent: number;
  readonly healthMinAttempts: number;
  readonly healthMaxPauseSeconds: number;
  readonly apiThrottlingRateLimit: number;
  readonly apiThrottlingBurstLimit: number;
  readonly portalFrameAncestors: string;
  readonly egress: EgressMode;
  readonly egressAvailabilityZones: number;
  readonly otlpEndpoint: string;
  readonly traceSampleRatio: number;
  /** The PostgreSQL relay's deployment; `undefined` when off (the default). */
  readonly postgresOutbox?: PostgresOutboxConfig;
  readonly prebuiltArtifactsDir?: string;
}

/** Where the PostgreSQL relay runs and what it connects with (checked when enabled). */
export interface PostgresOutboxConfig {
  /** The Secrets Manager secret holding the connection URL. */
  readonly secretArn: string;
  readonly subnetIds: string[];
  readonly securityGroupIds: string[];
}

/** A Secrets Manager secret's ARN (also template.yaml's PostgresOutboxDatabaseSecretArn AllowedPattern). */
export const SECRET_ARN = /^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$/;

/** The default share of new traces recorded when tracing is on (also template.yaml's TraceSampleRatio). */
export const DEFAULT_TRACE_SAMPLE_RATIO = 0.05;

/** One origin of portalFrameAncestors (also template.yaml's PortalFrameAncestors AllowedPattern, as a list). */
export const PORTAL_ORIGIN = /^https:\/\/[A-Za-z0-9.-]+(:[0-9]{1,5})?$/;

/** Seconds the replay function keeps an examined DLQ message hidden (Rust constant DRAIN_VISIBILITY_SECONDS). */
export const REPLAY_DRAIN_VISIBILITY_SECONDS = 330;

/** What `alarmEmail` must look like: name@domain.tld, no spaces (also template.yaml's AlarmEmail AllowedPattern). */
export const ALARM_EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;

/** Context key of an option: `tern:<name>`. */
export const contextKey = (name: keyof TernOptions): string => `tern:${name}`;

type Kind = 'number' | 'numbers' | 'string' | 'boolean';
const KINDS: { [K in keyof Required<TernOptions>]: Kind } = {
  alarmEmail: 'string',
  targetDeliveriesPerSecond: 'number',
  reserveSenderConcurrency: 'boolean',
  lambdaConcurrencyQuota: 'number',
  retrySchedule: 'numbers',
  attemptTimeoutMs: 'number',
  retryAfterCeilingSeconds: 'number',
  attemptLogTtlDays: 'number',
  maxPayloadBytes: 'number',
  nat64: 'boolean',
  relayTimeoutSeconds: 'number',
  senderTimeoutSeconds: 'number',
  replayTimeoutSeconds: 'number',
  relayMemoryMb: 'number',
  senderMemoryMb: 'number',
  replayMemoryMb: 'number',
  relayBatchSize: 'number',
  senderBatchSize: 'number',
  senderMaxConcurrency: 'number',
  maxReceiveCount: 'number',
  deliveryVisibilityTimeoutSeconds: 'number',
  logRetentionDays: 'number',
  retainData: 'boolean',
  tableCapacityMode: 'string',
  healthFailureThreshold: 'number',
  healthProbeIntervalSeconds: 'number',
  healthWindowSeconds: 'number',
  healthDisableBelowPercent: 'number',
  healthDegradedBelowPercent: 'number',
  healthMinAttempts: 'number',
  healthMaxPauseSeconds: 'number',
  apiThrottlingRateLimit: 'number',
  apiThrottlingBurstLimit: 'number',
  portalFrameAncestors: 'string',
  egress: 'string',
  egressAvailabilityZones: 'number',
  otlpEndpoint: 'string',
  traceSampleRatio: 'number',
  postgresOutbox: 'boolean',
  postgresOutboxSecretArn: 'string',
  postgresOutboxSubnetIds: 'string',
  postgresOutboxSecurityGroupIds: 'string',
  prebuiltArtifactsDir: 'string',
};

/** Context from the command line arrives as strings; cdk.json may hold real JSON values. */
function coerce(name: string, kind: Kind, raw: unknown): unknown {
  if (raw === undefined || raw === null || raw === '') return undefined;
  switch (kind) {
    case 'string':
      return String(raw);
    case 'boolean':
      if (typeof raw === 'boolean') return raw;
      if (raw === 'true' || raw === 'false') return raw === 'true';
      break;
    case 'number': {
      const n = typeof raw === 'number' ? raw : Number(raw);
      if (Number.isFinite(n)) return n;
      break;
    }
    case 'numbers': {
      const list = Array.isArray(raw) ? raw : String(raw).split(',');
      const nums = list.map((v) => (typeof v === 'number' ? v : Number(String(v).trim())));
      if (nums.length > 0 && nums.every(Number.isFinite)) return nums;
      break;
    }
  }
  throw new Error(`tern:${name}: cannot read ${JSON.stringify(raw)} as ${kind}`);
}

/** Resolves the options of one stack: props first, then context, then settings.json. */
export function resolveConfig(node: Node, settings: TernSettings, props: TernOptions = {}): TernConfig {
  const pick = <K extends keyof TernOptions>(name: K, fallback: TernOptions[K]): TernOptions[K] => {
    if (props[name] !== undefined) return props[name];
    const fromContext = coerce(name, KINDS[name], node.tryGetContext(contextKey(name)));
    return (fromContext ?? fallback) as TernOptions[K];
  };
  const f = settings.functions;
  const es = settings.eventSources;
  const d = settings.delivery;

  const senderTimeoutSeconds = pick('senderTimeoutSeconds', f.sender.timeoutSeconds)!;
  const minVisibility = minimumVisibilityTimeout(senderTimeoutSeconds, es.sender.maximumBatchingWindowSeconds);
  const explicitVisibility = pick('deliveryVisibilityTimeoutSeconds', undefined);
  const senderBatchSize = pick('senderBatchSize', es.sender.batchSize)!;
  const target = pick('targetDeliveriesPerSecond', settings.capacity.targetDeliveriesPerSecond)!;
  let capacity: CapacityPlan;
  try {
    capacity = deriveCapacity(target, {
      senderBatchSize,
      targetUtilizationPercent: settings.capacity.targetUtilizationPercent,
      minimum: settings.capacity.minimum,
    });
  } catch (e) {
    throw new Error(`Tern stack settings: ${(e as Error).message}`);
  }
  const senderMaxConcurrency = pick('senderMaxConcurrency', capacity.senderMaxConcurrency)!;
  const reserve = pick('reserveSenderConcurrency', settings.capacity.reserveSenderConcurrency)!;

  const config: TernConfig = {
    alarmEmail: pick('alarmEmail', undefined),
    retrySchedule: pick('retrySchedule', d.retrySchedule)!,
    attemptTimeoutMs: pick('attemptTimeoutMs', d.attemptTimeoutMs)!,
    retryAfterCeilingSeconds: pick('retryAfterCeilingSeconds', d.retryAfterCeilingSeconds)!,
    attemptLogTtlDays: pick('attemptLogTtlDays', d.attemptLogTtlDays)!,
    maxPayloadBytes: pick('maxPayloadBytes', d.maxPayloadBytes)!,
    nat64: pick('nat64', d.nat64)!,
    relayTimeoutSeconds: pick('relayTimeoutSeconds', f.relay.timeoutSeconds)!,
    senderTimeoutSeconds,
    replayTimeoutSeconds: pick('replayTimeoutSeconds', f.replay.timeoutSeconds)!,
    relayMemoryMb: pick('relayMemoryMb', f.relay.memoryMb)!,
    senderMemoryMb: pick('senderMemoryMb', f.sender.memoryMb)!,
    replayMemoryMb: pick('replayMemoryMb', f.replay.memoryMb)!,
    relayBatchSize: pick('relayBatchSize', es.relay.batchSize)!,
    senderBatchSize,
    senderMaxConcurrency,
    // The mapping never starts more than its maximum: reserving as much means it is never throttled.
    senderReservedConcurrency: reserve ? senderMaxConcurrency : undefined,
    relayParallelizationFactor: capacity.relayParallelizationFactor,
    capacity,
    lambdaConcurrencyQuota: pick('lambdaConcurrencyQuota', DEFAULT_ACCOUNT_CONCURRENCY)!,
    maxReceiveCount: pick('maxReceiveCount', settings.queues.delivery.maxReceiveCount)!,
    deliveryVisibilityTimeoutSeconds:
      explicitVisibility ?? Math.max(settings.queues.delivery.visibilityTimeoutSeconds, minVisibility),
    logRetentionDays: pick('logRetentionDays', settings.logs.retentionDays)!,
    retainData: pick('retainData', true)!,
    tableCapacityMode: pick('tableCapacityMode', settings.capacity.mode)!,
    healthFailureThreshold: pick('healthFailureThreshold', settings.health.failureThreshold)!,
    healthProbeIntervalSeconds: pick('healthProbeIntervalSeconds', settings.health.probeIntervalSeconds)!,
    healthWindowSeconds: pick('healthWindowSeconds', settings.health.windowSeconds)!,
    healthDisableBelowPercent: pick('healthDisableBelowPercent', settings.health.disableBelowPercent)!,
    healthDegradedBelowPercent: pick('healthDegradedBelowPercent', settings.health.degradedBelowPercent)!,
    healthMinAttempts: pick('healthMinAttempts', settings.health.minAttempts)!,
    healthMaxPauseSeconds: pick('healthMaxPauseSeconds', settings.health.maxPauseSeconds)!,
    apiThrottlingRateLimit: pick('apiThrottlingRateLimit', capacity.apiThrottlingRateLimit)!,
    apiThrottlingBurstLimit: pick('apiThrottlingBurstLimit', capacity.apiThrottlingBurstLimit)!,
    portalFrameAncestors: pick('portalFrameAncestors', '') ?? '',
    egress: pick('egress', settings.egress.mode)!,
    egressAvailabilityZones: pick('egressAvailabilityZones', settings.egress.availabilityZones)!,
    otlpEndpoint: pick('otlpEndpoint', '') ?? '',
    traceSampleRatio: pick('traceSampleRatio', DEFAULT_TRACE_SAMPLE_RATIO)!,
    postgresOutbox: pick('postgresOutbox', settings.postgresOutbox.enabled)
      ? {
          secretArn: pick('postgresOutboxSecretArn', '') ?? '',
          subnetIds: list(pick('postgresOutboxSubnetIds', '')),
          securityGroupIds: list(pick('postgresOutboxSecurityGroupIds', '')),
        }
      : undefined,
    prebuiltArtifactsDir: pick('prebuiltArtifactsDir', undefined),
  };
  validate(config, minVisibility);
  return config;
}

/** A comma-separated list, blanks dropped. */
function list(v: string | undefined): string[] {
  return (v ?? '').split(',').map((x) => x.trim()).filter((x) => x !== '');
}

/**
 * AWS guidance for SQS-triggered functions: visibility timeout >= 6x the function
 * timeout plus the batching window, so a throttled or retried batch is not
 * received again while an earlier invocation still works on it.
 */
export function minimumVisibilityTimeout(senderTimeoutSeconds: number, batchingWindowSeconds: number): number {
  return 6 * senderTimeoutSeconds + batchingWindowSeconds;
}

function validate(c: TernConfig, minVisibility: number): void {
  const fail = (msg: string): never => {
    throw new Error(`Tern stack settings: ${msg}`);
  };
  const intIn = (name: string, v: number, lo: number, hi: number) => {
    if (!Number.isInteger(v) || v < lo || v > hi) fail(`${name} must be an integer in ${lo}..${hi}, got ${v}`);
  };
  if (c.tableCapacityMode !== 'on-demand' && c.tableCapacityMode !== 'provisioned') {
    fail(`tableCapacityMode must be "on-demand" or "provisioned", got ${JSON.stringify(c.tableCapacityMode)}`);
  }
  if (c.egress !== 'shared' && c.egress !== 'static') {
    fail(`egress must be "shared" or "static", got ${JSON.stringify(c.egress)}`);
  }
  // template.yaml writes out each zone's subnets, NAT gateway and address under a condition.
  intIn('egressAvailabilityZones', c.egressAvailabilityZones, 1, MAX_EGRESS_AVAILABILITY_ZONES);
  // SNS accepts any string as an e-mail endpoint at deploy time and the subscription then
  // never confirms: the alarms would go nowhere. Same rule as the SAM AlarmEmail pattern.
  if (c.alarmEmail !== undefined && !ALARM_EMAIL.test(c.alarmEmail)) {
    fail(`alarmEmail must be an e-mail address (name@domain), got ${JSON.stringify(c.alarmEmail)}`);
  }
  intIn('senderBatchSize', c.senderBatchSize, 1, 10);
  intIn('relayBatchSize', c.relayBatchSize, 1, 10000);
  intIn('senderMaxConcurrency', c.senderMaxConcurrency, ESM_MIN_CONCURRENCY, ESM_MAX_CONCURRENCY);
  intIn('lambdaConcurrencyQuota', c.lambdaConcurrencyQuota, 1, 10_000_000);
  // Lambda refuses a reservation that leaves less than 100 of the account's quota unreserved.
  if (c.senderReservedConcurrency !== undefined && c.senderReservedConcurrency > c.lambdaConcurrencyQuota - UNRESERVED_CONCURRENCY_MINIMUM) {
    fail(
      `the sender's reserved concurrency (${c.senderReservedConcurrency}, its maximum concurrency for ${c.capacity.targetDeliveriesPerSecond} deliveries/s) ` +
        `must leave ${UNRESERVED_CONCURRENCY_MINIMUM} of the account's Lambda concurrency quota (lambdaConcurrencyQuota ${c.lambdaConcurrencyQuota}) unreserved: ` +
        `ask AWS for a higher quota and set lambdaConcurrencyQuota, lower targetDeliveriesPerSecond, or set reserveSenderConcurrency false`,
    );
  }
  intIn('maxReceiveCount', c.maxReceiveCount, 1, 1000);
  intIn('relayTimeoutSeconds', c.relayTimeoutSeconds, 1, 900);
  intIn('senderTimeoutSeconds', c.senderTimeoutSeconds, 1, 900);
  intIn('replayTimeoutSeconds', c.replayTimeoutSeconds, 1, 900);
  intIn('deliveryVisibilityTimeoutSeconds', c.deliveryVisibilityTimeoutSeconds, 0, 43200);
  // The replay function hides each DLQ message it examines for 330 s (DRAIN_VISIBILITY_SECONDS in
  // shared/tern-handlers/src/replay.rs) so one run never sees a message twice: it must end before that.
  if (c.replayTimeoutSeconds >= REPLAY_DRAIN_VISIBILITY_SECONDS) {
    fail(`replayTimeoutSeconds (${c.replayTimeoutSeconds}) must be below ${REPLAY_DRAIN_VISIBILITY_SECONDS}`);
  }
  if (c.deliveryVisibilityTimeoutSeconds < minVisibility) {
    fail(
      `deliveryVisibilityTimeoutSeconds (${c.deliveryVisibilityTimeoutSeconds}) must be >= 6 x senderTimeoutSeconds ` +
        `+ batching window (${minVisibility})`,
    );
  }
  // "Well below" the sender timeout: half leaves room for the DynamoDB and SQS calls around a POST.
  if (c.attemptTimeoutMs <= 0 || c.attemptTimeoutMs * 2 > c.senderTimeoutSeconds * 1000) {
    fail(`attemptTimeoutMs (${c.attemptTimeoutMs}) must be positive and at most half of senderTimeoutSeconds`);
  }
  if (c.retrySchedule.length === 0 || c.retrySchedule.some((s) => !Number.isInteger(s) || s <= 0)) {
    fail(`retrySchedule must be a non-empty list of positive whole seconds, got ${c.retrySchedule.join(',')}`);
  }
  // The same ranges as the SAM Health* parameters.
  intIn('healthFailureThreshold', c.healthFailureThreshold, 1, 1000);
  intIn('healthProbeIntervalSeconds', c.healthProbeIntervalSeconds, 1, 3600);
  intIn('healthWindowSeconds', c.healthWindowSeconds, 60, 86400);
  intIn('healthDisableBelowPercent', c.healthDisableBelowPercent, 0, 100);
  intIn('healthDegradedBelowPercent', c.healthDegradedBelowPercent, 0, 100);
  intIn('healthMinAttempts', c.healthMinAttempts, 1, 100000);
  intIn('healthMaxPauseSeconds', c.healthMaxPauseSeconds, 1, 86400);
  // API Gateway's account quota per Region (10,000 requests per second, burst 5,000) caps any
  // stage; the same ranges as the SAM ApiThrottling* parameters.
  intIn('apiThrottlingRateLimit', c.apiThrottlingRateLimit, 1, API_MAX_RATE);
  intIn('apiThrottlingBurstLimit', c.apiThrottlingBurstLimit, 1, API_MAX_BURST);
  // The portal's frame-ancestors: whole https origins only, nothing a CSP would read as more.
  for (const o of c.portalFrameAncestors.split(',').map((x) => x.trim()).filter((x) => x !== '')) {
    if (!PORTAL_ORIGIN.test(o)) fail(`portalFrameAncestors: ${JSON.stringify(o)} is not an https origin (https://host[:port])`);
  }
  // The exporter takes an http(s) URL; anything else would fail every function at start.
  if (c.otlpEndpoint !== '' && !/^https?:\/\/[^\s]+$/.test(c.otlpEndpoint)) {
    fail(`otlpEndpoint must be empty or an http(s) URL, got ${JSON.stringify(c.otlpEndpoint)}`);
  }
  if (!(c.traceSampleRatio >= 0 && c.traceSampleRatio <= 1)) {
    fail(`traceSampleRatio must be in 0..1, got ${c.traceSampleRatio}`);
  }
  // The PostgreSQL relay cannot start without its secret, nor reach a private database outside its VPC.
  const pg = c.postgresOutbox;
  if (pg) {
    if (!SECRET_ARN.test(pg.secretArn)) {
      fail(`postgresOutbox: postgresOutboxSecretArn must be a Secrets Manager secret ARN, got ${JSON.stringify(pg.secretArn)}`);
    }
    if (pg.subnetIds.length === 0 || pg.subnetIds.some((x) => !/^subnet-[0-9a-f]+$/.test(x))) {
      fail(`postgresOutbox: postgresOutboxSubnetIds must list subnet ids (subnet-...), got ${JSON.stringify(pg.subnetIds.join(','))}`);
    }
    if (pg.securityGroupIds.length === 0 || pg.securityGroupIds.some((x) => !/^sg-[0-9a-f]+$/.test(x))) {
      fail(`postgresOutbox: postgresOutboxSecurityGroupIds must list security group ids (sg-...), got ${JSON.stringify(pg.securityGroupIds.join(','))}`);
    }
  }
  // Disabling is the stronger verdict: an endpoint is reported degraded before it is disabled.
  if (c.healthDisableBelowPercent > c.healthDegradedBelowPercent) {
    fail(
      `healthDisableBelowPercent (${c.healthDisableBelowPercent}) must be at most healthDegradedBelowPercent (${c.healthDegradedBelowPercent})`,
    );
  }
  for (const [name, v] of [
    ['relayMemoryMb', c.relayMemoryMb],
    ['senderMemoryMb', c.senderMemoryMb],
    ['replayMemoryMb', c.replayMemoryMb],
  ] as const) {
    intIn(name, v, 128, 10240);
  }
}
