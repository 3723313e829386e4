import { Aws, Stack } from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';

/**
 * The operational-events topic: the sender publishes `endpoint.degraded`, `endpoint.disabled`
 * and `endpoint.recovered` here, each with the message attributes `tenant_id`, `event_type`
 * and `endpoint_id`, so each endpoint owner subscribes with a filter policy on `tenant_id`.
 * Encrypted with the AWS managed SNS key (publishers and subscribers in the account need no key
 * grant; CloudWatch does not publish here) and TLS-only.
 */
export class OperationalTopic extends Construct {
  public readonly topic: sns.Topic;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    this.topic = new sns.Topic(this, 'Topic', {
      displayName: 'Tern operational events',
      masterKey: kms.Alias.fromAliasName(this, 'SnsKey', AWS_MANAGED_SNS_KEY),
      enforceSSL: true,
    });
  }
}

/** The AWS managed key of SNS (template.yaml sets the same alias). */
export const AWS_MANAGED_SNS_KEY = 'alias/aws/sns';

/**
 * The two Contributor Insights rule bodies over the sender's log group. The sender logs one JSON
 * line per attempt: `{"level":"INFO","fields":{"message":"attempt","tenant_id":..,"endpoint_id":..,
 * "outcome":"delivered"|"retry"|"dead_letter:<reason>",...}}` (RUST_LOG=info lets it through).
 * template.yaml repeats these bodies and the infra tests check they agree.
 */
export function insightRuleBodies(logGroupName: string): { failingEndpoints: object; busiestTenants: object } {
  const rule = (keys: string[], filters: object[]) => ({
    Schema: { Name: 'CloudWatchLogRule', Version: 1 },
    LogGroupNames: [logGroupName],
    LogFormat: 'JSON',
    Contribution: { Keys: keys, Filters: filters },
    AggregateOn: 'Count',
  });
  const attempts = { Match: '$.fields.message', In: ['attempt'] };
  return {
    // Failed attempts (retry or dead letter) per endpoint, with its tenant.
    failingEndpoints: rule(['$.fields.tenant_id', '$.fields.endpoint_id'], [
      attempts,
      { Match: '$.fields.outcome', NotIn: ['delivered'] },
    ]),
    // Attempts (any outcome) per tenant: who drives the volume.
    busiestTenants: rule(['$.fields.tenant_id'], [attempts]),
  };
}

/**
 * Contributor Insights rules over the sender's attempt log: top endpoints by failed attempts and
 * top tenants by attempts. Per-endpoint visibility without one custom metric per endpoint; the
 * rules are billed per matched log event (about $0.02 per million).
 */
export class AttemptInsights extends Construct {
  public readonly failingEndpoints: cw.CfnInsightRule;
  public readonly busiestTenants: cw.CfnInsightRule;

  constructor(scope: Construct, id: string, props: { readonly senderLogGroup: logs.ILogGroup }) {
    super(scope, id);
    const bodies = insightRuleBodies(props.senderLogGroup.logGroupName);
    const stackName = Stack.of(this).stackName;
    this.failingEndpoints = new cw.CfnInsightRule(this, 'FailingEndpoints', {
      ruleName: `${stackName}-failing-endpoints`,
      ruleState: 'ENABLED',
      ruleBody: Stack.of(this).toJsonString(bodies.failingEndpoints),
    });
    this.busiestTenants = new cw.CfnInsightRule(this, 'BusiestTenants', {
      ruleName: `${stackName}-busiest-tenants`,
      ruleState: 'ENABLED',
      ruleBody: Stack.of(this).toJsonString(bodies.busiestTenants),
    });
  }
}

/** A dashboard widget showing a Contributor Insights rule's top contributors over time. */
export class ContributorInsightsWidget extends cw.ConcreteWidget {
  constructor(
    private readonly props: {
      readonly ruleName: string;
      readonly title: string;
      readonly width: number;
      readonly height: number;
      /** Contributors shown, 10 by default. */
      readonly maxContributorCount?: number;
    },
  ) {
    super(props.width, props.height);
  }

  toJson(): any[] {
    return [
      {
        type: 'metric',
        x: this.x,
        y: this.y,
        width: this.width,
        height: this.height,
        properties: {
          view: 'timeSeries',
          region: Aws.REGION,
          title: this.props.title,
          insightRule: { ruleName: this.props.ruleName, maxContributorCount: this.props.maxContributorCount ?? 10, orderBy: 'Sum' },
          period: 300,
          stat: 'Sum',
          legend: { position: 'right' },
        },
      },
    ];
  }
}
