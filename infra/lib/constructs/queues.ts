import { Duration } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { TernSettings } from '../settings';

export interface QueuesProps {
  readonly settings: TernSettings;
  /** Visibility timeout of the delivery queue, seconds (already checked >= 6x the sender timeout). */
  readonly deliveryVisibilityTimeoutSeconds: number;
  /** Receives before SQS moves a delivery message to the DLQ. */
  readonly maxReceiveCount: number;
}

/**
 * The three standard queues. SQS-managed SSE keeps the Step Functions role and
 * the functions free of KMS permissions; every queue refuses non-TLS requests.
 */
export class Queues extends Construct {
  /** Delivery messages (one per event and endpoint), read by the sender. */
  public readonly delivery: sqs.Queue;
  /**
   * Dead letters: written by the sender (exhausted, gone, blocked, disabled) and by SQS
   * native redrive after maxReceiveCount receives (crashes, poison messages).
   */
  public readonly dlq: sqs.Queue;
  /** Stream records the relay could not handle: the OnFailure destination of its mapping, also written by the relay. */
  public readonly relayFailures: sqs.Queue;

  constructor(scope: Construct, id: string, props: QueuesProps) {
    super(scope, id);
    const q = props.settings.queues;
    const common = { encryption: sqs.QueueEncryption.SQS_MANAGED, enforceSSL: true };

    this.dlq = new sqs.Queue(this, 'Dlq', {
      ...common,
      retentionPeriod: Duration.seconds(q.dlq.messageRetentionSeconds),
    });
    this.delivery = new sqs.Queue(this, 'Delivery', {
      ...common,
      visibilityTimeout: Duration.seconds(props.deliveryVisibilityTimeoutSeconds),
      retentionPeriod: Duration.seconds(q.delivery.messageRetentionSeconds),
      deadLetterQueue: { queue: this.dlq, maxReceiveCount: props.maxReceiveCount },
    });
    this.relayFailures = new sqs.Queue(this, 'RelayFailures', {
      ...common,
      retentionPeriod: Duration.seconds(q.relayFailures.messageRetentionSeconds),
    });
  }
}
