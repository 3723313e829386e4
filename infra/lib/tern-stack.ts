import { Annotations, CfnOutput, Fn, Stack, StackProps } from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { resolveConfig, TernConfig, TernOptions } from './config';
import { Alarms } from './constructs/alarms';
import { TernApi } from './constructs/api';
import { Dashboard } from './constructs/dashboard';
import { DelayedDelivery } from './constructs/delayed-delivery';
import { StaticEgress } from './constructs/egress';
import { Functions, retentionDays } from './constructs/functions';
import { AttemptInsights, OperationalTopic } from './constructs/operational';
import { Portal } from './constructs/portal';
import { Queues } from './constructs/queues';
import { Storage } from './constructs/storage';
import { applyNagSuppressions } from './nag-suppressions';
import { loadSettings, TernSettings } from './settings';

/** Stack props: the usual StackProps plus every Tern option (see TernOptions and README.md). */
export interface TernStackProps extends StackProps, TernOptions {
  /** Settings to start from instead of infra/settings.json (tests). */
  readonly settings?: TernSettings;
}

/** The whole Tern system: tables, queues, delayed-delivery state machine, functions, the API, alarms, dashboard. */
export class TernStack extends Stack {
  public readonly config: TernConfig;
  public readonly storage: Storage;
  public readonly queues: Queues;
  public readonly delayedDelivery: DelayedDelivery;
  public readonly functions: Functions;
  public readonly alarms: Alarms;
  public readonly dashboard: Dashboard;
  /** Where the sender publishes endpoint health changes (endpoint.degraded, .disabled, .recovered). */
  public readonly operational: OperationalTopic;
  /** Contributor Insights rules over the sender's attempt log. */
  public readonly insights: AttemptInsights;
  /** The Tern API: an HTTP API with IAM authorization in front of the api function. */
  public readonly api: TernApi;
  /** The customer portal's table and key ring. */
  public readonly portal: Portal;
  /** `egress: static` only: the VPC, NAT gateways and Elastic IPs the sender and api send from. */
  public readonly egress?: StaticEgress;

  constructor(scope: Construct, id: string, props: TernStackProps = {}) {
    super(scope, id, props);
    const settings = props.settings ?? loadSettings();
    const config = resolveConfig(this.node, settings, props);
    this.config = config;
    const plan = config.capacity;
    if (plan.senderCarriesPerSecond < plan.targetDeliveriesPerSecond) {
      // One SQS mapping runs at most 1,000 batches (docs/capacity.md: what to do beyond).
      Annotations.of(this).addWarningV2(
        'tern:capacity',
        `targetDeliveriesPerSecond ${plan.targetDeliveriesPerSecond}: one delivery queue mapping carries ${plan.senderCarriesPerSecond} deliveries/s ` +
          'at 0.5 s per batch (1,000 concurrent batches at most); beyond it use provisioned pollers or more queues (docs/capacity.md)',
      );
    }

    this.storage = new Storage(this, 'Storage', {
      settings,
      retainData: config.retainData,
      capacityMode: config.tableCapacityMode,
      capacity: config.capacity,
    });
    this.queues = new Queues(this, 'Queues', {
      settings,
      deliveryVisibilityTimeoutSeconds: config.deliveryVisibilityTimeoutSeconds,
      maxReceiveCount: config.maxReceiveCount,
    });
    this.delayedDelivery = new DelayedDelivery(this, 'DelayedDelivery', { deliveryQueue: this.queues.delivery });
    const stateMachine = this.delayedDelivery.stateMachine;
    this.operational = new OperationalTopic(this, 'Operational');
    this.portal = new Portal(this, 'Portal', { settings });
    this.functions = new Functions(this, 'Functions', {
      settings,
      config,
      storage: this.storage,
      queues: this.queues,
      stateMachine,
      operationalTopic: this.operational.topic,
      portal: this.portal,
    });
    if (config.egress === 'static') {
      // The two functions that open connections to receivers: the sender (deliveries, OAuth
      // token fetches) and the api (test sends), so a receiver's firewall sees the same addresses.
      this.egress = new StaticEgress(this, 'Egress', {
        availabilityZones: config.egressAvailabilityZones,
        vpcCidr: settings.egress.vpcCidr,
        logRetention: retentionDays(config.logRetentionDays),
      });
      this.egress.attach(this.functions.sender, this.functions.roles.sender);
      this.egress.attach(this.functions.api, this.functions.roles.api);
    }
    this.api = new TernApi(this, 'Api', {
      config,
      handler: this.functions.api,
      logRetention: retentionDays(config.logRetentionDays),
    });
    this.insights = new AttemptInsights(this, 'Insights', { senderLogGroup: this.functions.logGroups.sender });
    this.dashboard = new Dashboard(this, 'Dashboard', {
      settings,
      functions: this.functions,
      queues: this.queues,
      insights: this.insights,
    });
    this.alarms = new Alarms(this, 'Alarms', {
      settings,
      functions: this.functions,
      queues: this.queues,
      stateMachine,
      api: this.api.httpApi,
      alarmEmail: config.alarmEmail,
      dashboardUrl: this.dashboard.url,
    });

    this.outputs();
    applyNagSuppressions(this);
  }

  private outputs(): void {
    // Only the outbox and the API's URL are exported: they are what another stack (the application) needs.
    const out = (id: string, value: string, description: string, exported = false) =>
      new CfnOutput(this, id, { value, description, exportName: exported ? `${this.stackName}-${id}` : undefined });
    // The application writes outbox items in its own transactions: it needs these two.
    out('OutboxTableName', this.storage.outbox.tableName, 'Outbox table: the application writes events here', true);
    out('OutboxTableArn', this.storage.outbox.tableArn, 'Outbox table ARN (for the application role)', true);
    // The application's backend calls the API here (signed with SigV4 for execute-api).
    out('ApiUrl', this.api.url, 'The Tern API base URL (SigV4 for execute-api; paths /v1/tenants/{tenant_id}/...)', true);
    out('EndpointsTableName', this.storage.endpoints.tableName, 'Endpoints and subscriptions');
    out('SecretsKeyArn', this.storage.secretsKey.keyArn, 'KMS key that seals endpoint secrets at rest (tern reads it as TERN_SECRETS_KEY_ID)');
    out('AttemptsTableName', this.storage.attempts.tableName, 'Delivery attempt log');
    out('PortalTableName', this.portal.table.tableName, "The API's short-lived records (TTL): used portal links, rate-limit windows, Idempotency-Key records");
    out('PortalKeySecretArn', this.portal.keys.secretArn, 'Customer portal: the key ring signing portal links and sessions');
    out('HealthTableName', this.storage.health.tableName, 'Per-endpoint health (circuit state, rolling success rate)');
    out('DeliveryQueueUrl', this.queues.delivery.queueUrl, 'Delivery queue');
    out('DeliveryQueueArn', this.queues.delivery.queueArn, 'Delivery queue ARN (console redrive destination)');
    out('DlqUrl', this.queues.dlq.queueUrl, 'Dead-letter queue');
    out('DlqArn', this.queues.dlq.queueArn, 'Dead-letter queue ARN (console redrive)');
    out('RelayFailureQueueUrl', this.queues.relayFailures.queueUrl, 'Stream records the relay could not handle');
    out('DelayStateMachineArn', this.delayedDelivery.stateMachine.stateMachineArn, 'Delayed-delivery state machine');
    out('ReplayFunctionName', this.functions.replay.functionName, 'Invoke to replay dead letters');
    out('ConsoleFunctionName', this.functions.console.functionName, "The operator's console: the dashboard's custom widgets");
    out('DashboardUrl', this.dashboard.url, 'The dashboard: DLQ graph, dead letters with Replay, endpoints with Enable, event lookup');
    out('AlarmTopicArn', this.alarms.topic.topicArn, 'Alarm notifications');
    if (this.egress) {
      // The addresses to give receivers for their firewalls (`tern egress-ips` prints them).
      const ips = this.egress.addresses.map((eip) => eip.attrPublicIp);
      ips.forEach((ip, i) => out(`EgressIp${i + 1}`, ip, `Fixed source IP ${i + 1}: the NAT gateway of availability zone ${i + 1}`));
      out('EgressIps', Fn.join(',', ips), 'Every fixed source IP of the sender and the api, comma-separated: give them all to receivers');
    }
    out(
      'OperationalTopicArn',
      this.operational.topic.topicArn,
      'Operational events (endpoint.degraded/disabled/recovered): subscribe with a filter policy on tenant_id',
    );
  }
}
