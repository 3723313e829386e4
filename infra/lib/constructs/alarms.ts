import { Duration } from 'aws-cdk-lib';
import * as apigwv2 from 'aws-cdk-lib/aws-apigatewayv2';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subs from 'aws-cdk-lib/aws-sns-subscriptions';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { TernSettings } from '../settings';
import { Functions } from './functions';
import { SERVICE_DIMENSION, TernMetrics } from './metrics';
import { Queues } from './queues';

export interface AlarmsProps {
  readonly settings: TernSettings;
  readonly functions: Functions;
  readonly queues: Queues;
  readonly stateMachine: sfn.IStateMachine;
  /** The Tern API's HTTP API (its 5xx answers are alarmed). */
  readonly api: apigwv2.IHttpApi;
  /** Subscribed to the topic by e-mail when set. */
  readonly alarmEmail?: string;
  /** The dashboard's URL: every alarm description ends with it (the console's widgets are there). */
  readonly dashboardUrl: string;
}

/**
 * Alarms, all sent to one SNS topic (alarm and back-to-OK). docs/operating.md says what
 * each means and what to do. Missing data is never a breach: SQS stops
 * publishing after hours of quiet, and a quiet hour has no success rate.
 */
export class Alarms extends Construct {
  public readonly topic: sns.Topic;
  public readonly alarms: cw.Alarm[] = [];
  private readonly action: cwActions.SnsAction;
  private readonly dashboardUrl: string;

  constructor(scope: Construct, id: string, props: AlarmsProps) {
    super(scope, id);
    this.dashboardUrl = props.dashboardUrl;
    const a = props.settings.alarms;
    const { relay, sender, replay } = props.functions;
    const { dlq, delivery, relayFailures } = props.queues;

    // A customer managed key: the AWS managed SNS key does not let CloudWatch publish.
    const key = new kms.Key(this, 'TopicKey', {
      enableKeyRotation: true,
      description: 'Tern alarm topic encryption',
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
      }),
    );
    this.topic = new sns.Topic(this, 'Topic', { masterKey: key, enforceSSL: true, displayName: 'Tern alarms' });
    if (props.alarmEmail) this.topic.addSubscription(new subs.EmailSubscription(props.alarmEmail));
    this.action = new cwActions.SnsAction(this.topic);

    const max1m = { statistic: cw.Stats.MAXIMUM, period: Duration.minutes(1) };
    this.add('DlqDepth', dlq.metricApproximateNumberOfMessagesVisible(max1m), 0,
      'Dead letters are waiting in the Tern DLQ: inspect them, fix the cause, then redrive or replay.');
    this.add('RelayFailuresDepth', relayFailures.metricApproximateNumberOfMessagesVisible(max1m), 0,
      'Outbox stream records the relay could not handle are waiting in the relay-failure queue.');
    this.add('DeliveryQueueOldestMessage',
      delivery.metricApproximateAgeOfOldestMessage({ statistic: cw.Stats.MAXIMUM, period: Duration.minutes(5) }),
      a.deliveryQueueOldestMessageSeconds,
      `A delivery message has waited more than ${a.deliveryQueueOldestMessageSeconds} s: the sender is behind or failing.`);
    this.add('RelayIteratorAge',
      relay.metric('IteratorAge', { statistic: cw.Stats.MAXIMUM, period: Duration.minutes(5) }),
      a.relayIteratorAgeMs,
      `The relay is more than ${a.relayIteratorAgeMs} ms behind the outbox stream (records expire after 24 h).`);
    for (const [name, fn] of [['Relay', relay], ['Sender', sender], ['Replay', replay]] as const) {
      this.functionAlarms(name, fn);
    }
    if (props.functions.relayPg) this.relayPgAlarms(props.settings, props.functions.relayPg);
    this.add('DelayedDeliveryFailed',
      props.stateMachine.metricFailed({ statistic: cw.Stats.SUM, period: Duration.minutes(5) }), 0,
      'A delayed retry could not be put back on the delivery queue: that delivery is lost unless replayed from its attempts.');

    // Emitted by the relay (EMF, shared/tern-handlers/src/metrics.rs) for a record only a
    // misconfigured stream produces: an INSERT without NewImage (a KEYS_ONLY stream).
    // Each such record is also parked, but this names the cause.
    this.add('RelayMisconfigured',
      new cw.Metric({
        namespace: props.settings.metrics.namespace,
        metricName: 'RelayMisconfigured',
        dimensionsMap: { ...SERVICE_DIMENSION },
        statistic: cw.Stats.SUM,
        period: Duration.minutes(5),
      }), 0,
      'The relay received outbox stream records without NewImage: the stream view type is not NEW_IMAGE. Fix the stream, then re-read the parked records by their keys.');

    // Emitted by the sender (EMF, shared/tern-handlers/src/markers.rs) for each delivered
    // or finish marker it could not write within its retry window (write throttling on
    // the attempts table): a later copy of that delivery may be POSTed again.
    this.add('MarkersLost',
      new TernMetrics(props.settings.metrics.namespace).metric('MarkersLost'),
      a.markersLost,
      'The sender could not mark deliveries delivered or finished (attempts table throttled or failing): a later copy of each may be POSTed again (receivers dedupe on webhook-id). Check the attempts table\'s throttling and capacity.');

    // Emitted by the sender (EMF, shared/tern-handlers/src/sender.rs) for each message it
    // put back after a failure of ours (a throttled or failed AWS call): delayed 1-60 s,
    // never lost. A few are a transient throttle; a sustained rate (settings.json
    // alarms.putBack in each of putBackPeriods 5-minute periods in a row) is our own AWS
    // calls failing persistently (docs/operating.md explains the threshold).
    this.add('PutBack',
      new TernMetrics(props.settings.metrics.namespace).metric('PutBack'),
      a.putBack,
      `The sender put back more than ${a.putBack} messages after failures of its own (throttled or failed AWS calls) in each of ${a.putBackPeriods} 5-minute periods in a row: deliveries are delayed 1-60 s each time. Find the throttled table or failing service in the sender's log ("our failure; put back").`,
      cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
      a.putBackPeriods);

    // Emitted by the sender for each message of our failures that could be neither put
    // back (SendMessageBatch) nor hidden for the same short delay (ChangeMessageVisibility):
    // each waits out the delivery queue's visibility timeout in flight, which is what fills
    // SQS's in-flight quota at scale.
    this.add('PutBackFailed',
      new TernMetrics(props.settings.metrics.namespace).metric('PutBackFailed'),
      a.putBackFailed,
      'The sender could neither put back nor hide for a short delay messages that failed on its side (SQS refused or did not answer both calls): each waits out the delivery queue\'s visibility timeout in flight. Check SQS errors and throttling for the delivery queue.');

    // API Gateway's count of 5xx answers of the Tern API (all stages: there is one): the
    // function's 503 after its 25 s deadline (AWS too slow), a crash or timeout of the function
    // (API Gateway's 500/503), an integration error. 4xx (a bad request, a denied signature,
    // a throttle's 429) is the caller's and is not alarmed.
    this.add('Api5xx',
      props.api.metricServerError({ statistic: cw.Stats.SUM, period: Duration.minutes(5) }),
      a.api5xx,
      `The Tern API answered more than ${a.api5xx} requests with a 5xx in 5 minutes: read the api function's log and the API's access log (status, integrationError, error).`);

    const period = Duration.seconds(a.successRatePeriodSeconds);
    this.add('SuccessRate', new TernMetrics(props.settings.metrics.namespace).successRate(period),
      a.successRatePercent,
      `Fewer than ${a.successRatePercent} % of delivery attempts succeeded over ${a.successRatePeriodSeconds} s.`,
      cw.ComparisonOperator.LESS_THAN_THRESHOLD);
  }

  /**
   * The PostgreSQL relay (postgresOutbox only): its invocations' errors and throttles, the
   * database errors it survives (EMF `OutboxRelayErrors`: it returns normally after them, so
   * Lambda's Errors misses them), and its lag (EMF `OutboxLag`, the oldest unpublished row's
   * age when a run ended). A 5-minute period without any lag value fires too: every run that
   * reaches the database reports one, so none means no run did.
   */
  private relayPgAlarms(settings: TernSettings, fn: lambda.IFunction): void {
    this.functionAlarms('RelayPg', fn);
    const emf = (metricName: string, statistic: string) =>
      new cw.Metric({
        namespace: settings.metrics.namespace,
        metricName,
        dimensionsMap: { ...SERVICE_DIMENSION },
        statistic,
        period: Duration.minutes(5),
      });
    this.add('RelayPgDatabaseErrors', emf('OutboxRelayErrors', cw.Stats.SUM), 0,
      'The PostgreSQL relay could not connect, claim, mark or commit (its rows stay unpublished and are claimed again): read the relay-pg log group; check the database, RDS Proxy and the security groups.');
    const lag = settings.alarms.pgRelayLagSeconds;
    this.add('RelayPgLag', emf('OutboxLag', cw.Stats.MAXIMUM), lag,
      `The oldest unpublished row of the PostgreSQL outbox is more than ${lag} s old, or no relay run reported its lag for 5 minutes: check RelayPgErrors, RelayPgDatabaseErrors and the relay-pg log group.`,
      cw.ComparisonOperator.GREATER_THAN_THRESHOLD, 1, cw.TreatMissingData.BREACHING);
  }

  private functionAlarms(name: string, fn: lambda.IFunction): void {
    const sum5m = { statistic: cw.Stats.SUM, period: Duration.minutes(5) };
    this.add(`${name}Errors`, fn.metricErrors(sum5m), 0,
      `The ${name.toLowerCase()} function failed invocations (crash, timeout, panic).`);
    this.add(`${name}Throttles`, fn.metricThrottles(sum5m), 0,
      `The ${name.toLowerCase()} function was throttled (account or function concurrency).`);
  }

  private add(
    id: string,
    metric: cw.IMetric,
    threshold: number,
    description: string,
    comparisonOperator = cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods = 1,
    treatMissingData = cw.TreatMissingData.NOT_BREACHING,
  ): void {
    const alarm = new cw.Alarm(this, id, {
      metric,
      threshold,
      comparisonOperator,
      evaluationPeriods,
      datapointsToAlarm: evaluationPeriods,
      treatMissingData,
      alarmDescription: `${description} Dashboard (dead letters, endpoints, replay): ${this.dashboardUrl}`,
    });
    alarm.addAlarmAction(this.action);
    alarm.addOkAction(this.action);
    this.alarms.push(alarm);
  }
}
