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
}

export interface FunctionSettings {
  /** Lambda timeout, seconds. */
  readonly timeoutSeconds: number;
  /** Lambda memory, MB. */
  readonly memoryMb: number;
}

export interface TernSettings {
  readonly tables: {
    readonly outbox: TableSettings;
    readonly endpoints: TableSettings;
    readonly attempts: TableSettings;
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
  };
  readonly eventSources: {
    readonly relay: {
      readonly batchSize: number;
      readonly startingPosition: 'TRIM_HORIZON' | 'LATEST';
      readonly bisectBatchOnFunctionError: boolean;
      readonly maximumRetryAttempts: number;
      readonly maximumRecordAgeSeconds: number;
      readonly parallelizationFactor: number;
      readonly reportBatchItemFailures: boolean;
      readonly filterPattern: Record<string, unknown>;
    };
    readonly sender: {
      readonly batchSize: number;
      readonly maximumBatchingWindowSeconds: number;
      readonly maximumConcurrency: number;
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
  };
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
  };
}

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
    ['eventSources.relay.batchSize', s.eventSources?.relay?.batchSize],
    ['eventSources.sender.batchSize', s.eventSources?.sender?.batchSize],
    ['delivery.attemptTimeoutMs', s.delivery?.attemptTimeoutMs],
    ['logs.retentionDays', s.logs?.retentionDays],
    ['alarms.successRatePercent', s.alarms?.successRatePercent],
  ];
  for (const [key, value] of positive) {
    if (typeof value !== 'number' || !(value > 0)) {
      throw new Error(`settings.json: ${key} must be a positive number, got ${JSON.stringify(value)}`);
    }
  }
  if (!Array.isArray(s.delivery.retrySchedule) || s.delivery.retrySchedule.length === 0) {
    throw new Error('settings.json: delivery.retrySchedule must be a non-empty array of seconds');
  }
  return s;
}
