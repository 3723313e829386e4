/**
 * Typed access to `infra/settings.json`, the single source of the settings that
 * matter (DESIGN.md section 6). The CDK app takes its defaults from here; the
 * tests check both the synthesized template and `template.yaml` against it.
 */
import * as fs from 'fs';
import * as path from 'path';

export interface TableSettings {
  readonly partitionKey: string;
  readonly sortKey?: string;
  readonly ttlAttribute?: string;
  readonly streamViewType?: 'NEW_IMAGE' | 'NEW_AND_OLD_IMAGES' | 'OLD_IMAGE' | 'KEYS_ONLY';
  /** The attempts table only: the sparse index of waiting deliveries (tern waiting). */
  readonly waitingIndex?: WaitingIndexSettings;
  /** The health table only: the KEYS_ONLY index of a tenant's endpoints. */
  readonly tenantIndex?: TenantIndexSettings;
}

/**
 * settings.json `tables.health.tenantIndex`: a KEYS_ONLY global secondary index of the
 * health table (string partition and sort keys, tern_aws::health::TENANT_INDEX) listing a
 * tenant's endpoints; written once per endpoint. Provisioned mode gives it the health
 * table's capacity ranges.
 */
export interface TenantIndexSettings {
  readonly name: string;
  readonly partitionKey: string;
  readonly sortKey: string;
}

/**
 * settings.json `tables.attempts.waitingIndex`: a sparse global secondary index of the
 * deliveries waiting for a later attempt (the ledger's waiting list, tern_aws::waiting).
 * String partition key (`<tenant>#<endpoint>`), number sort key (due time, Unix ms),
 * INCLUDE projection. Provisioned mode gives it its own ranges (capacity.minimum.waitingIndex up to the maximum lib/capacity.ts derives).
 */
export interface WaitingIndexSettings {
  readonly name: string;
  readonly partitionKey: string;
  readonly sortKey: string;
  readonly projectedAttributes: string[];
}

export interface FunctionSettings {
  /** Lambda timeout, seconds. */
  readonly timeoutSeconds: number;
  /** Lambda memory, MB. */
  readonly memoryMb: number;
}

/** DynamoDB billing of the tables: on-demand (pay per request) or provisioned with auto scaling. */
export type TableCapacityMode = 'on-demand' | 'provisioned';

/** Provisioned mode's idle read and write capacity of one table or index, capacity units (the auto scaling minima). */
export interface TableCapacityMinimum {
  readonly read: number;
  readonly write: number;
}

/** Per-endpoint health settings (settings.json `health`). */
export interface HealthSettings {
  /** Consecutive failed attempts that open an endpoint's circuit (TERN_HEALTH_FAILURE_THRESHOLD). */
  readonly failureThreshold: number;
  /** At most one POST per this many seconds to an endpoint whose circuit is open (TERN_HEALTH_PROBE_INTERVAL_SECONDS). */
  readonly probeIntervalSeconds: number;
  /** Rolling window of the success rate, seconds (TERN_HEALTH_WINDOW_SECONDS). */
  readonly windowSeconds: number;
  /** Disable an endpoint below this success rate over the window, percent (TERN_HEALTH_DISABLE_BELOW_PERCENT). */
  readonly disableBelowPercent: number;
  /** Report an endpoint degraded below this success rate over the window, percent (TERN_HEALTH_DEGRADED_BELOW_PERCENT). */
  readonly degradedBelowPercent: number;
  /** Fewest attempts in the window before the rate can disable an endpoint (TERN_HEALTH_MIN_ATTEMPTS). */
  readonly minAttempts: number;
  /** Longest pause a receiver's backpressure puts on its endpoint, seconds (TERN_HEALTH_MAX_PAUSE_SECONDS). */
  readonly maxPauseSeconds: number;
}

/** The customer portal (settings.json `portal`): its per-tenant rate limits, per minute. */
export interface PortalSettings {
  /** Portal links a tenant may mint per minute (TERN_PORTAL_SESSIONS_PER_MINUTE). */
  readonly sessionsPerMinute: number;
  /** Test events a tenant may send from the portal per minute (TERN_PORTAL_TEST_SENDS_PER_MINUTE). */
  readonly testSendsPerMinute: number;
}

/** Where the sender and the api function send from: AWS's shared Lambda ranges, or a VPC's NAT gateways. */
export type EgressMode = 'shared' | 'static';

/**
 * settings.json `egress` (issue 20, fixed source IPs). In `static` mode the sender and the api
 * function run in private subnets behind one NAT gateway with an Elastic IP per availability zone.
 */
export interface EgressSettings {
  /** `shared` (default: no VPC) or `static`. */
  readonly mode: EgressMode;
  /** Availability zones, so NAT gateways and Elastic IPs, in static mode: 1-3 (template.yaml writes three out). */
  readonly availabilityZones: number;
  /** The VPC's IPv4 range in static mode: a /16, cut into /20 subnets (Fn::Cidr with 12 host bits). */
  readonly vpcCidr: string;
}

/** Most availability zones the static egress spans: template.yaml writes each out under a condition. */
export const MAX_EGRESS_AVAILABILITY_ZONES = 3;

/**
 * settings.json `postgresOutbox` (issue 31): the PostgreSQL relay, off unless `enabled`.
 * See docs/outbox.md, "Deploying the PostgreSQL relay".
 */
export interface PostgresOutboxSettings {
  /** Deploy the relay-pg function, its schedule and alarms. */
  readonly enabled: boolean;
  /** The function's timeout, seconds: a little over the schedule's 60 s, so consecutive runs barely overlap. */
  readonly timeoutSeconds: number;
  /** The function's memory, MB. */
  readonly memoryMb: number;
  /** Concurrency reserved for (and capping) the function: 2 lets a run overlap the next one's start. */
  readonly reservedConcurrency: number;
  /** The EventBridge schedule's expression (`rate(1 minute)`). */
  readonly scheduleExpression: string;
  /** TERN_PG_RELAY_BATCH_ROWS, rows per claim (1-1000). */
  readonly batchRows: number;
  /** TERN_PG_RELAY_POLL_MS, milliseconds between polls of an empty outbox (100-1000). */
  readonly pollMs: number;
  /** TERN_OUTBOX_RETENTION_HOURS, hours a published row is kept (1-87600). */
  readonly retentionHours: number;
}

export interface TernSettings {
  readonly tables: {
    readonly outbox: TableSettings;
    readonly endpoints: TableSettings;
    readonly attempts: TableSettings;
    /** Per-endpoint health: one item per endpoint (rolling-window counters, circuit state, next probe). */
    readonly health: TableSettings;
    /** The API's short-lived records, each item with a TTL: used portal links, rate-limit windows, Idempotency-Key records. */
    readonly portal: TableSettings;
  };
  readonly queues: {
    readonly delivery: {
      readonly visibilityTimeoutSeconds: number;
      readonly maxReceiveCount: number;
      readonly messageRetentionSeconds: number;
    };
    readonly dlq: { readonly messageRetentionSeconds: number };
    readonly relayFailures: { readonly messageRetentionSeconds: number };
  };
  readonly functions: {
    readonly relay: FunctionSettings;
    readonly sender: FunctionSettings;
    readonly replay: FunctionSettings;
    /** The console (dashboard custom widgets): a 20 s replay plus a 20 s DLQ read fit in its 60 s. */
    readonly console: FunctionSettings;
    /**
     * The Tern API (functions/api): its timeout stays above the router's 25 s request deadline
     * (tern_api::REQUEST_DEADLINE) and below API Gateway's 30 s integration timeout (HTTP API quota).
     */
    readonly api: FunctionSettings;
  };
  readonly eventSources: {
    readonly relay: {
      readonly batchSize: number;
      readonly startingPosition: 'TRIM_HORIZON' | 'LATEST';
      readonly bisectBatchOnFunctionError: boolean;
      readonly maximumRetryAttempts: number;
      readonly maximumRecordAgeSeconds: number;
      readonly reportBatchItemFailures: boolean;
      readonly filterPattern: Record<string, unknown>;
    };
    readonly sender: {
      readonly batchSize: number;
      readonly maximumBatchingWindowSeconds: number;
      readonly reportBatchItemFailures: boolean;
    };
  };
  readonly delivery: {
    /** Delay before each retry, seconds. */
    readonly retrySchedule: number[];
    readonly attemptTimeoutMs: number;
    readonly retryAfterCeilingSeconds: number;
    readonly maxPayloadBytes: number;
    readonly outboxTtlDays: number;
    readonly attemptLogTtlDays: number;
    readonly httpsOnly: boolean;
    /**
     * Mutual TLS: the name prefix of the Secrets Manager secrets holding endpoints' client
     * certificates (tern_core::client_certificate::MTLS_SECRET_PREFIX); the sender may read those only.
     */
    readonly mtlsSecretPrefix: string;
    /**
     * Judge a NAT64 address (64:ff9b::/96, RFC 6052) by the IPv4 it embeds instead of refusing it:
     * for senders in an IPv6-only or DNS64 network. The sender's TERN_NAT64; default false.
     */
    readonly nat64: boolean;
  };
  /**
   * Capacity (docs/capacity.md): the deliveries per second to carry, from which lib/capacity.ts
   * derives the sender's concurrency, the relay's parallelization factor, the API stage's
   * throttling and the provisioned maxima; the DynamoDB mode; provisioned mode's minima.
   */
  readonly capacity: {
    /** Deliveries per second the deployment must carry (a whole number, at least 1). */
    readonly targetDeliveriesPerSecond: number;
    /** Reserve the sender's concurrency (its maximum concurrency) so the API and the portal cannot take it. */
    readonly reserveSenderConcurrency: boolean;
    readonly mode: TableCapacityMode;
    /** Auto scaling keeps consumed / provisioned capacity near this, percent (20-90, Application Auto Scaling's range for DynamoDB). */
    readonly targetUtilizationPercent: number;
    /** Provisioned mode's idle capacity (auto scaling minima) of each table and of the waiting index. */
    readonly minimum: {
      readonly outbox: TableCapacityMinimum;
      readonly endpoints: TableCapacityMinimum;
      readonly attempts: TableCapacityMinimum;
      readonly health: TableCapacityMinimum;
      readonly waitingIndex: TableCapacityMinimum;
    };
  };
  /** Per-endpoint health (circuit breaker, auto-disable, degraded report): the sender's TERN_HEALTH_* variables. */
  readonly health: HealthSettings;
  /** The customer portal (settings.json `portal`). */
  readonly portal: PortalSettings;
  /** Fixed source IPs (settings.json `egress`). */
  readonly egress: EgressSettings;
  /** The PostgreSQL relay (settings.json `postgresOutbox`), off by default. */
  readonly postgresOutbox: PostgresOutboxSettings;
  readonly metrics: { readonly namespace: string };
  /** Added by the infra: CloudWatch Logs retention of every log group, days. */
  readonly logs: { readonly retentionDays: number };
  /** Added by the infra: alarm thresholds shared by the CDK app and template.yaml. */
  readonly alarms: {
    /** Delivery queue ApproximateAgeOfOldestMessage (Maximum) threshold, seconds. */
    readonly deliveryQueueOldestMessageSeconds: number;
    /** Relay IteratorAge (Maximum) threshold, milliseconds. */
    readonly relayIteratorAgeMs: number;
    /** Success rate (percent of Attempts that succeeded) below which the alarm fires. */
    readonly successRatePercent: number;
    /** Window of the success-rate alarm, seconds. */
    readonly successRatePeriodSeconds: number;
    /**
     * Lost delivered or finish markers (EMF `MarkersLost`, sum over 5 min) above which
     * the MarkersLost alarm fires; 0 fires on any. A whole number, 0 or more.
     */
    readonly markersLost: number;
    /**
     * Messages the sender put back after failures of its own (EMF `PutBack`, sum over 5
     * min) above which, in each of `putBackPeriods` periods in a row, the PutBack alarm
     * fires. A whole number, 0 or more.
     */
    readonly putBack: number;
    /** 5-minute periods in a row the PutBack alarm needs above `putBack`: 1 to 12. */
    readonly putBackPeriods: number;
    /**
     * Messages of our failures left for the visibility timeout (EMF `PutBackFailed`, sum
     * over 5 min) above which the PutBackFailed alarm fires; 0 fires on any. A whole
     * number, 0 or more.
     */
    readonly putBackFailed: number;
    /**
     * 5xx answers of the Tern API (API Gateway's `5xx` metric, sum over 5 min) above which the
     * Api5xx alarm fires; 0 fires on any. A whole number, 0 or more.
     */
    readonly api5xx: number;
    /** The PostgreSQL relay's lag (EMF `OutboxLag`, Maximum over 5 min) above which RelayPgLag fires, seconds. */
    readonly pgRelayLagSeconds: number;
  };
}

/** The Tern API router's deadline for one request, seconds (tern_api::REQUEST_DEADLINE in shared/tern-api/src/lib.rs). */
export const API_REQUEST_DEADLINE_SECONDS = 25;

/** The longest API Gateway waits for an HTTP API integration, seconds (API Gateway quotas: HTTP APIs, not adjustable). */
export const HTTP_API_INTEGRATION_TIMEOUT_SECONDS = 30;

/** The infra folder: the nearest ancestor of this file that holds settings.json (works from lib/ and dist/lib/). */
export const INFRA_DIR: string = findUp(__dirname, 'settings.json');

/** The Rust workspace root (holds the workspace Cargo.toml). */
export const WORKSPACE_DIR: string = path.resolve(INFRA_DIR, '..');

/** The Step Functions definition shared by the CDK app and template.yaml. */
export const STATE_MACHINE_DEFINITION_FILE: string = path.join(INFRA_DIR, 'statemachine', 'delayed-delivery.asl.json');

function findUp(start: string, file: string): string {
  let dir = start;
  for (;;) {
    if (fs.existsSync(path.join(dir, file))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`cannot find ${file} above ${start}`);
    dir = parent;
  }
}

/** Reads and sanity-checks settings.json. Throws on a missing or non-positive number. */
export function loadSettings(file: string = path.join(INFRA_DIR, 'settings.json')): TernSettings {
  const s = JSON.parse(fs.readFileSync(file, 'utf-8')) as TernSettings;
  const positive: Array<[string, unknown]> = [
    ['queues.delivery.visibilityTimeoutSeconds', s.queues?.delivery?.visibilityTimeoutSeconds],
    ['queues.delivery.maxReceiveCount', s.queues?.delivery?.maxReceiveCount],
    ['functions.relay.timeoutSeconds', s.functions?.relay?.timeoutSeconds],
    ['functions.sender.timeoutSeconds', s.functions?.sender?.timeoutSeconds],
    ['functions.replay.timeoutSeconds', s.functions?.replay?.timeoutSeconds],
    ['functions.api.memoryMb', s.functions?.api?.memoryMb],
    ['capacity.targetDeliveriesPerSecond', s.capacity?.targetDeliveriesPerSecond],
    ['portal.sessionsPerMinute', s.portal?.sessionsPerMinute],
    ['portal.testSendsPerMinute', s.portal?.testSendsPerMinute],
    ['eventSources.relay.batchSize', s.eventSources?.relay?.batchSize],
    ['eventSources.sender.batchSize', s.eventSources?.sender?.batchSize],
    ['delivery.attemptTimeoutMs', s.delivery?.attemptTimeoutMs],
    ['logs.retentionDays', s.logs?.retentionDays],
    ['alarms.successRatePercent', s.alarms?.successRatePercent],
    ['alarms.pgRelayLagSeconds', s.alarms?.pgRelayLagSeconds],
    ['postgresOutbox.timeoutSeconds', s.postgresOutbox?.timeoutSeconds],
    ['postgresOutbox.memoryMb', s.postgresOutbox?.memoryMb],
    ['postgresOutbox.reservedConcurrency', s.postgresOutbox?.reservedConcurrency],
    ['postgresOutbox.batchRows', s.postgresOutbox?.batchRows],
    ['postgresOutbox.pollMs', s.postgresOutbox?.pollMs],
    ['postgresOutbox.retentionHours', s.postgresOutbox?.retentionHours],
    ['health.failureThreshold', s.health?.failureThreshold],
    ['health.probeIntervalSeconds', s.health?.probeIntervalSeconds],
    ['health.windowSeconds', s.health?.windowSeconds],
    ['health.disableBelowPercent', s.health?.disableBelowPercent],
    ['health.degradedBelowPercent', s.health?.degradedBelowPercent],
    ['health.minAttempts', s.health?.minAttempts],
    ['health.maxPauseSeconds', s.health?.maxPauseSeconds],
  ];
  for (const [key, value] of positive) {
    if (typeof value !== 'number' || !(value > 0)) {
      throw new Error(`settings.json: ${key} must be a positive number, got ${JSON.stringify(value)}`);
    }
  }
  const w = s.tables?.attempts?.waitingIndex;
  if (
    !w ||
    ![w.name, w.partitionKey, w.sortKey].every((v) => typeof v === 'string' && v.length > 0) ||
    !Array.isArray(w.projectedAttributes) ||
    !w.projectedAttributes.every((a) => typeof a === 'string' && a.length > 0)
  ) {
    throw new Error(
      `settings.json: tables.attempts.waitingIndex must name the index, its partitionKey and sortKey and its projectedAttributes, got ${JSON.stringify(w)}`,
    );
  }
  const ti = s.tables?.health?.tenantIndex;
  if (!ti || ![ti.name, ti.partitionKey, ti.sortKey].every((v) => typeof v === 'string' && v.length > 0)) {
    throw new Error(`settings.json: tables.health.tenantIndex must name the index, its partitionKey and sortKey, got ${JSON.stringify(ti)}`);
  }
  if (s.capacity?.mode !== 'on-demand' && s.capacity?.mode !== 'provisioned') {
    throw new Error(`settings.json: capacity.mode must be "on-demand" or "provisioned", got ${JSON.stringify(s.capacity?.mode)}`);
  }
  if (!Number.isInteger(s.capacity.targetDeliveriesPerSecond)) {
    throw new Error(`settings.json: capacity.targetDeliveriesPerSecond must be a whole number, got ${JSON.stringify(s.capacity.targetDeliveriesPerSecond)}`);
  }
  if (typeof s.capacity.reserveSenderConcurrency !== 'boolean') {
    throw new Error(`settings.json: capacity.reserveSenderConcurrency must be true or false, got ${JSON.stringify(s.capacity.reserveSenderConcurrency)}`);
  }
  for (const table of ['outbox', 'endpoints', 'attempts', 'health', 'waitingIndex'] as const) {
    for (const dim of ['read', 'write'] as const) {
      const units = s.capacity.minimum?.[table]?.[dim];
      if (!Number.isInteger(units) || (units as number) < 1) {
        throw new Error(`settings.json: capacity.minimum.${table}.${dim} must be whole units, at least 1, got ${JSON.stringify(units)}`);
      }
    }
  }
  const target = s.capacity.targetUtilizationPercent;
  if (typeof target !== 'number' || target < 20 || target > 90) {
    throw new Error(`settings.json: capacity.targetUtilizationPercent must be in 20..90, got ${JSON.stringify(target)}`);
  }
  if (!Number.isInteger(s.alarms?.markersLost) || s.alarms.markersLost < 0) {
    throw new Error(`settings.json: alarms.markersLost must be a whole number, 0 or more, got ${JSON.stringify(s.alarms?.markersLost)}`);
  }
  for (const key of ['putBack', 'putBackFailed'] as const) {
    if (!Number.isInteger(s.alarms?.[key]) || s.alarms[key] < 0) {
      throw new Error(`settings.json: alarms.${key} must be a whole number, 0 or more, got ${JSON.stringify(s.alarms?.[key])}`);
    }
  }
  if (!Number.isInteger(s.alarms?.putBackPeriods) || s.alarms.putBackPeriods < 1 || s.alarms.putBackPeriods > 12) {
    throw new Error(`settings.json: alarms.putBackPeriods must be a whole number in 1..12, got ${JSON.stringify(s.alarms?.putBackPeriods)}`);
  }
  if (!Number.isInteger(s.alarms?.api5xx) || s.alarms.api5xx < 0) {
    throw new Error(`settings.json: alarms.api5xx must be a whole number, 0 or more, got ${JSON.stringify(s.alarms?.api5xx)}`);
  }
  // The function must outlive the router's deadline (so the 503 problem gets out) and end
  // before API Gateway gives up on the integration.
  const apiTimeout = s.functions?.api?.timeoutSeconds;
  if (
    !Number.isInteger(apiTimeout) ||
    apiTimeout <= API_REQUEST_DEADLINE_SECONDS ||
    apiTimeout >= HTTP_API_INTEGRATION_TIMEOUT_SECONDS
  ) {
    throw new Error(
      `settings.json: functions.api.timeoutSeconds must be a whole number of seconds above the API's ${API_REQUEST_DEADLINE_SECONDS} s ` +
        `request deadline and below API Gateway's ${HTTP_API_INTEGRATION_TIMEOUT_SECONDS} s integration timeout, got ${JSON.stringify(apiTimeout)}`,
    );
  }
  const e = s.egress;
  if (e?.mode !== 'shared' && e?.mode !== 'static') {
    throw new Error(`settings.json: egress.mode must be "shared" or "static", got ${JSON.stringify(e?.mode)}`);
  }
  if (!Number.isInteger(e.availabilityZones) || e.availabilityZones < 1 || e.availabilityZones > MAX_EGRESS_AVAILABILITY_ZONES) {
    throw new Error(
      `settings.json: egress.availabilityZones must be a whole number in 1..${MAX_EGRESS_AVAILABILITY_ZONES}, got ${JSON.stringify(e.availabilityZones)}`,
    );
  }
  if (typeof e.vpcCidr !== 'string' || !/^(\d{1,3}\.){3}\d{1,3}\/16$/.test(e.vpcCidr)) {
    throw new Error(`settings.json: egress.vpcCidr must be an IPv4 /16 (it is cut into /20 subnets), got ${JSON.stringify(e.vpcCidr)}`);
  }
  if (typeof s.delivery?.nat64 !== 'boolean') {
    throw new Error(`settings.json: delivery.nat64 must be true or false, got ${JSON.stringify(s.delivery?.nat64)}`);
  }
  if (!Array.isArray(s.delivery.retrySchedule) || s.delivery.retrySchedule.length === 0) {
    throw new Error('settings.json: delivery.retrySchedule must be a non-empty array of seconds');
  }
  return s;
}
