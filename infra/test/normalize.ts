/**
 * Reduces a CloudFormation template (the synthesized CDK one, or template.yaml
 * with its SAM resources) to the settings that matter, with references renamed
 * to role names ("delivery", "relay", ...) so that both templates can be compared.
 */
import { CfnTemplate } from './helpers';

/** Logical id -> role name ("outbox", "delivery", "relay", ...). */
export type Names = Record<string, string>;

/** Evaluates a template condition (by name) with every parameter at its default. */
export function conditionHolds(name: string, names: Names, t: CfnTemplate): boolean {
  const conditions = (t.Conditions ?? {}) as Record<string, unknown>;
  if (!(name in conditions)) throw new Error(`no condition ${name}`);
  return evalCondition(conditions[name], names, t);
}

function evalCondition(c: unknown, names: Names, t: CfnTemplate): boolean {
  const o = (c ?? {}) as Record<string, unknown>;
  const [key] = Object.keys(o);
  const args = o[key] as unknown[];
  switch (key) {
    case 'Condition':
      return conditionHolds(String(o.Condition), names, t);
    case 'Fn::Equals': {
      // CloudFormation compares text: a Number parameter's 2 equals '2'.
      const text = (v: unknown) => (typeof v === 'number' || typeof v === 'string' ? String(v) : JSON.stringify(v));
      return text(normalizeValue(args[0], names, t)) === text(normalizeValue(args[1], names, t));
    }
    case 'Fn::Not':
      return !evalCondition(args[0], names, t);
    case 'Fn::And':
      return args.every((a) => evalCondition(a, names, t));
    case 'Fn::Or':
      return args.some((a) => evalCondition(a, names, t));
    default:
      throw new Error(`cannot evaluate condition ${JSON.stringify(c)}`);
  }
}

export function normalizeValue(v: unknown, names: Names, t: CfnTemplate): unknown {
  if (Array.isArray(v)) return v.map((x) => normalizeValue(x, names, t));
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    // Conditional values resolve with the parameters at their defaults; AWS::NoValue drops the property.
    if (keys.length === 1 && keys[0] === 'Fn::If') {
      const [cond, yes, no] = o['Fn::If'] as [string, unknown, unknown];
      return normalizeValue(conditionHolds(cond, names, t) ? yes : no, names, t);
    }
    if (keys.length === 1 && keys[0] === 'Fn::FindInMap') {
      const [map, top, second] = (o['Fn::FindInMap'] as unknown[]).map((x) => String(normalizeValue(x, names, t)));
      const value = (t.Mappings as any)?.[map]?.[top]?.[second];
      if (value === undefined) throw new Error(`no mapping ${map}.${top}.${second}`);
      return value;
    }
    if (keys.length === 1 && keys[0] === 'Ref' && o.Ref === 'AWS::NoValue') return undefined;
    if (keys.length === 1 && keys[0] === 'Ref') {
      const id = String(o.Ref);
      if (names[id]) return `ref:${names[id]}`;
      const param = t.Parameters?.[id];
      if (param && param.Default !== undefined) return param.Default;
      return `ref:${id}`;
    }
    if (keys.length === 1 && keys[0] === 'Fn::GetAtt') {
      const [id, attr] = o['Fn::GetAtt'] as [string, string];
      return `${names[id] ?? id}.${attr}`;
    }
    return Object.fromEntries(keys.map((k) => [k, normalizeValue(o[k], names, t)]));
  }
  return v;
}

/** Numbers and numeric strings compare equal (CloudFormation accepts both). */
function num(v: unknown): unknown {
  return typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
}

export interface Critical {
  functions: Record<string, unknown>;
  tables: Record<string, unknown>;
  /** Auto scaling of each provisioned table: dimension -> range, target and metric (empty when on-demand). */
  capacity: Record<string, Record<string, unknown>>;
  queues: Record<string, unknown>;
  tlsOnlyQueues: string[];
  mappings: Record<string, unknown>;
  stateMachine: unknown;
  alarms: unknown[];
  logRetentionDays: unknown[];
  hasDashboard: boolean;
  exportedOutputs: string[];
}

const FUNCTION_NAMES = ['relay', 'sender', 'replay', 'console', 'api'];
const TABLE_NAMES = ['outbox', 'endpoints', 'attempts', 'health'];
const QUEUE_NAMES = ['delivery', 'dlq', 'relayFailures'];

/** Builds the comparable summary. `mappings` gives the event source mapping properties of each function. */
export function critical(
  t: CfnTemplate,
  names: Names,
  mappings: Record<string, Record<string, unknown>>,
  stateMachineType: string,
): Critical {
  const byName = (name: string) => {
    const id = Object.keys(names).find((k) => names[k] === name);
    if (!id) throw new Error(`no resource named ${name}`);
    return t.Resources[id];
  };
  const n = (v: unknown) => normalizeValue(v, names, t);

  const functions = Object.fromEntries(
    FUNCTION_NAMES.map((name) => {
      const p = byName(name).Properties;
      const vars = n(p.Environment?.Variables ?? {}) as Record<string, unknown>;
      // A Ref to a Number parameter reaches the function as text, like every environment value.
      const env = Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, typeof v === 'number' ? String(v) : v]));
      return [
        name,
        {
          Runtime: p.Runtime,
          Architectures: p.Architectures,
          Handler: p.Handler,
          Timeout: num(p.Timeout),
          MemorySize: num(p.MemorySize),
          ReservedConcurrentExecutions: num(n(p.ReservedConcurrentExecutions)),
          Environment: Object.fromEntries(Object.keys(env).sort().map((k) => [k, env[k]])),
          HasLogGroup: p.LoggingConfig?.LogGroup !== undefined,
        },
      ];
    }),
  );

  const tables = Object.fromEntries(
    TABLE_NAMES.map((name) => {
      const r = byName(name);
      const p = r.Properties;
      return [
        name,
        {
          KeySchema: p.KeySchema,
          AttributeDefinitions: p.AttributeDefinitions,
          GlobalSecondaryIndexes: n(p.GlobalSecondaryIndexes),
          // CloudFormation's default when BillingMode is absent (CDK omits it for provisioned tables).
          BillingMode: n(p.BillingMode) ?? 'PROVISIONED',
          ProvisionedThroughput: n(p.ProvisionedThroughput),
          StreamSpecification: p.StreamSpecification,
          TimeToLiveSpecification: p.TimeToLiveSpecification,
          PointInTimeRecoverySpecification: p.PointInTimeRecoverySpecification,
          SSESpecification: p.SSESpecification,
          DeletionPolicy: r.DeletionPolicy,
        },
      ];
    }),
  );

  // Resources behind a false condition are not deployed.
  const deployed = (r: { Condition?: string }) => !r.Condition || conditionHolds(r.Condition, names, t);
  const tableOf = (resourceId: unknown): string => {
    const text = JSON.stringify(resourceId);
    const id = Object.keys(names).find((k) => text.includes(`"Ref":"${k}"`) || text.includes(`\${${k}}`));
    if (!id) throw new Error(`scalable target on an unknown table: ${text}`);
    return names[id];
  };
  const capacity: Record<string, Record<string, unknown>> = {};
  for (const [id, r] of Object.entries(t.Resources)) {
    if (r.Type !== 'AWS::ApplicationAutoScaling::ScalableTarget' || !deployed(r)) continue;
    const p = r.Properties;
    const policies = Object.values(t.Resources).filter(
      (x) => x.Type === 'AWS::ApplicationAutoScaling::ScalingPolicy' && deployed(x) && x.Properties.ScalingTargetId?.Ref === id,
    );
    const table = tableOf(p.ResourceId);
    capacity[table] ??= {};
    capacity[table][p.ScalableDimension] = {
      ServiceNamespace: p.ServiceNamespace,
      MinCapacity: num(n(p.MinCapacity)),
      MaxCapacity: num(n(p.MaxCapacity)),
      Policies: policies.map((x) => {
        const c = x.Properties.TargetTrackingScalingPolicyConfiguration;
        return {
          PolicyType: x.Properties.PolicyType,
          TargetValue: num(n(c.TargetValue)),
          PredefinedMetricType: c.PredefinedMetricSpecification?.PredefinedMetricType,
        };
      }),
    };
  }

  const queues = Object.fromEntries(
    QUEUE_NAMES.map((name) => {
      const p = byName(name).Properties;
      return [
        name,
        {
          VisibilityTimeout: num(p.VisibilityTimeout ?? 30),
          MessageRetentionPeriod: num(p.MessageRetentionPeriod),
          RedrivePolicy: p.RedrivePolicy ? n(p.RedrivePolicy) : undefined,
          SqsManagedSseEnabled: p.SqsManagedSseEnabled,
          KmsMasterKeyId: p.KmsMasterKeyId,
        },
      ];
    }),
  );

  // Queues with a Deny on aws:SecureTransport=false in some queue policy.
  const tlsOnly = new Set<string>();
  for (const r of Object.values(t.Resources).filter((r) => r.Type === 'AWS::SQS::QueuePolicy')) {
    const denies = (r.Properties.PolicyDocument.Statement as any[]).some(
      (s) => s.Effect === 'Deny' && String(s.Condition?.Bool?.['aws:SecureTransport']) === 'false',
    );
    if (denies) for (const q of n(r.Properties.Queues) as string[]) tlsOnly.add(q.replace(/^ref:/, ''));
  }

  const alarms = Object.values(t.Resources)
    .filter((r) => r.Type === 'AWS::CloudWatch::Alarm' && deployed(r))
    .map((r) => {
      const p = r.Properties;
      return n({
        Namespace: p.Namespace,
        MetricName: p.MetricName,
        Dimensions: p.Dimensions,
        Statistic: p.Statistic,
        Period: num(p.Period),
        Metrics: p.Metrics,
        Threshold: num(p.Threshold),
        ComparisonOperator: p.ComparisonOperator,
        EvaluationPeriods: num(p.EvaluationPeriods),
        DatapointsToAlarm: num(p.DatapointsToAlarm),
        TreatMissingData: p.TreatMissingData,
        AlarmActions: p.AlarmActions,
        OKActions: p.OKActions,
      });
    })
    .map((a) => JSON.parse(JSON.stringify(a)))
    .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));

  const logRetentionDays = Object.values(t.Resources)
    .filter((r) => r.Type === 'AWS::Logs::LogGroup' && deployed(r))
    .map((r) => num(r.Properties?.RetentionInDays));

  const exportedOutputs = Object.entries(t.Outputs ?? {})
    .filter(([, o]) => o.Export !== undefined)
    .map(([k]) => k)
    .sort();

  return JSON.parse(
    JSON.stringify({
      functions,
      tables,
      capacity,
      queues,
      tlsOnlyQueues: [...tlsOnly].sort(),
      mappings: Object.fromEntries(Object.entries(mappings).map(([k, v]) => [k, n(v)])),
      stateMachine: { Type: stateMachineType },
      alarms,
      logRetentionDays,
      hasDashboard: Object.values(t.Resources).some((r) => r.Type === 'AWS::CloudWatch::Dashboard'),
      exportedOutputs,
    }),
  ) as Critical;
}

/** The event source mapping properties that SAM generates from a function's Events entry. */
export function samEventToMapping(event: { Type: string; Properties: Record<string, any> }): Record<string, unknown> {
  const { Stream, Queue, DestinationConfig, ...rest } = event.Properties;
  const mapping: Record<string, unknown> = { ...rest, EventSourceArn: Stream ?? Queue };
  if (DestinationConfig?.OnFailure) {
    // SAM's `Type: SQS` only chooses which send permission to add; CloudFormation gets the destination.
    mapping.DestinationConfig = { OnFailure: { Destination: DestinationConfig.OnFailure.Destination } };
  }
  return mapping;
}

/**
 * A string built with Fn::Join (CDK) or Fn::Sub (template.yaml) as one text: references to
 * named resources become `${name}`, pseudo parameters stay `${AWS::Region}` and the like,
 * `GetAtt`s become `${name.Attr}`.
 */
export function flattenText(v: unknown, names: Names): string {
  const nameOf = (id: string) => names[id] ?? id;
  if (typeof v === 'string') return v;
  const o = v as Record<string, any>;
  if (o.Ref) return `\${${nameOf(o.Ref)}}`;
  if (o['Fn::GetAtt']) return `\${${nameOf(o['Fn::GetAtt'][0])}.${o['Fn::GetAtt'][1]}}`;
  if (o['Fn::Join']) return (o['Fn::Join'][1] as unknown[]).map((p) => flattenText(p, names)).join(o['Fn::Join'][0]);
  if (o['Fn::Sub'] !== undefined) {
    const text: string = Array.isArray(o['Fn::Sub']) ? o['Fn::Sub'][0] : o['Fn::Sub'];
    return text.replace(/\$\{([^}]+)\}/g, (_m, ref: string) => {
      const [id, ...attr] = ref.split('.');
      return `\${${[nameOf(id), ...attr].join('.')}}`;
    });
  }
  throw new Error(`cannot flatten ${JSON.stringify(v)}`);
}
