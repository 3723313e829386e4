/**
 * Fixed source IPs (`egress: static`, issue 20): a VPC of the stack's own whose private subnets
 * reach the internet through one NAT gateway with an Elastic IP per availability zone. The
 * functions that talk to receivers (the sender: deliveries and OAuth token fetches; the api: test
 * sends) run there, so receivers can admit exactly these addresses.
 *
 * Written with the CloudFormation-level constructs (not `ec2.Vpc`) so that the resources are the
 * ones template.yaml writes out, one for one, and nothing else comes with them (ec2.Vpc adds a
 * Node.js custom resource to empty the default security group, and looks up zones at synth).
 */
import { Fn, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';

/**
 * Subnet blocks: the VPC's /16 is cut into /20s (12 host bits, Fn::Cidr); public subnet i takes
 * block i and private subnet i block PRIVATE_SUBNET_BLOCK_OFFSET + i, whatever the zone count.
 */
export const SUBNET_HOST_BITS = 12;
/** Block index of the first private subnet (after the three public ones). */
export const PRIVATE_SUBNET_BLOCK_OFFSET = 3;
/** Blocks Fn::Cidr hands out: three public, three private. */
const SUBNET_BLOCKS = 6;

/**
 * TCP ports the functions may open: every one. Tern's URL validation (tern_core::endpoint::validate_url)
 * accepts any port in an endpoint URL and in an OAuth token URL, so a narrower rule would break
 * receivers on, say, 8443. DNS needs no rule: security groups do not filter traffic to the
 * VPC's Amazon DNS server (Amazon VPC user guide, "Security group rules").
 */
export const EGRESS_TCP_PORTS = { from: 1, to: 65535 } as const;

/** Seconds a flow log aggregates a flow before it writes a record (600: the longest EC2 accepts, fewest records). */
export const FLOW_LOG_AGGREGATION_SECONDS = 600;

export interface StaticEgressProps {
  /** Availability zones (1-3): one public and one private subnet, a NAT gateway and an Elastic IP in each. */
  readonly availabilityZones: number;
  /** The VPC's IPv4 range, a /16 (settings.json egress.vpcCidr). */
  readonly vpcCidr: string;
  /** Retention of the flow log's log group. */
  readonly logRetention: logs.RetentionDays;
}

/** The network of the static egress and how a function joins it. */
export class StaticEgress extends Construct {
  public readonly vpc: ec2.CfnVPC;
  /** The private subnets the functions run in, one per zone. */
  public readonly privateSubnets: ec2.CfnSubnet[] = [];
  /** The Elastic IPs of the NAT gateways: the addresses receivers see, zone 1 first. */
  public readonly addresses: ec2.CfnEIP[] = [];
  public readonly natGateways: ec2.CfnNatGateway[] = [];
  /** Each private subnet's default route to its zone's NAT gateway (a function joins after these exist). */
  public readonly privateDefaultRoutes: ec2.CfnRoute[] = [];
  /** The DynamoDB gateway endpoint on the private route tables (free: DynamoDB traffic skips the NAT). */
  public readonly dynamoDbEndpoint: ec2.CfnVPCEndpoint;
  /** The functions' security group: no inbound rule, outbound TCP to any IPv4 address. */
  public readonly securityGroup: ec2.CfnSecurityGroup;
  /** Every flow of the VPC, accepted and rejected, to a log group (which source address reached which receiver). */
  public readonly flowLog: ec2.CfnFlowLog;
  public readonly flowLogGroup: logs.LogGroup;
  public readonly flowLogRole: iam.Role;

  constructor(scope: Construct, id: string, props: StaticEgressProps) {
    super(scope, id);
    const stack = Stack.of(this);
    this.vpc = new ec2.CfnVPC(this, 'Vpc', {
      cidrBlock: props.vpcCidr,
      enableDnsSupport: true,
      enableDnsHostnames: true,
      tags: [{ key: 'Name', value: `${stack.stackName}-egress` }],
    });
    const igw = new ec2.CfnInternetGateway(this, 'InternetGateway');
    const attachment = new ec2.CfnVPCGatewayAttachment(this, 'InternetGatewayAttachment', {
      vpcId: this.vpc.ref,
      internetGatewayId: igw.ref,
    });
    const blocks = Fn.cidr(this.vpc.attrCidrBlock, SUBNET_BLOCKS, String(SUBNET_HOST_BITS));

    // One public route table for every public subnet: its default route is the internet gateway.
    const publicRoutes = new ec2.CfnRouteTable(this, 'PublicRouteTable', { vpcId: this.vpc.ref });
    const publicDefault = new ec2.CfnRoute(this, 'PublicDefaultRoute', {
      routeTableId: publicRoutes.ref,
      destinationCidrBlock: '0.0.0.0/0',
      gatewayId: igw.ref,
    });
    publicDefault.node.addDependency(attachment);

    const privateRouteTables: ec2.CfnRouteTable[] = [];
    for (let i = 0; i < props.availabilityZones; i++) {
      const n = i + 1;
      const zone = Fn.select(i, Fn.getAzs());
      // The public subnet holds only the NAT gateway: no instance gets a public address.
      const publicSubnet = new ec2.CfnSubnet(this, `PublicSubnet${n}`, {
        vpcId: this.vpc.ref,
        availabilityZone: zone,
        cidrBlock: Fn.select(i, blocks),
        mapPublicIpOnLaunch: false,
        tags: [{ key: 'Name', value: `${stack.stackName}-egress-public-${n}` }],
      });
      new ec2.CfnSubnetRouteTableAssociation(this, `PublicSubnet${n}RouteTableAssociation`, {
        subnetId: publicSubnet.ref,
        routeTableId: publicRoutes.ref,
      });
      // The address receivers see. An EIP in a VPC needs the internet gateway attached first (EC2 docs).
      const eip = new ec2.CfnEIP(this, `Eip${n}`, {
        domain: 'vpc',
        tags: [{ key: 'Name', value: `${stack.stackName}-egress-${n}` }],
      });
      eip.node.addDependency(attachment);
      this.addresses.push(eip);
      const nat = new ec2.CfnNatGateway(this, `NatGateway${n}`, {
        subnetId: publicSubnet.ref,
        allocationId: eip.attrAllocationId,
        tags: [{ key: 'Name', value: `${stack.stackName}-egress-${n}` }],
      });
      this.natGateways.push(nat);

      const privateSubnet = new ec2.CfnSubnet(this, `PrivateSubnet${n}`, {
        vpcId: this.vpc.ref,
        availabilityZone: zone,
        cidrBlock: Fn.select(PRIVATE_SUBNET_BLOCK_OFFSET + i, blocks),
        mapPublicIpOnLaunch: false,
        tags: [{ key: 'Name', value: `${stack.stackName}-egress-private-${n}` }],
      });
      this.privateSubnets.push(privateSubnet);
      const privateRoutes = new ec2.CfnRouteTable(this, `PrivateRouteTable${n}`, { vpcId: this.vpc.ref });
      privateRouteTables.push(privateRoutes);
      new ec2.CfnSubnetRouteTableAssociation(this, `PrivateSubnet${n}RouteTableAssociation`, {
        subnetId: privateSubnet.ref,
        routeTableId: privateRoutes.ref,
      });
      // The zone's own NAT gateway: a zone's traffic does not cross zones (no inter-zone data
      // charge), and one zone's outage leaves the others sending.
      this.privateDefaultRoutes.push(
        new ec2.CfnRoute(this, `PrivateDefaultRoute${n}`, {
          routeTableId: privateRoutes.ref,
          destinationCidrBlock: '0.0.0.0/0',
          natGatewayId: nat.ref,
        }),
      );
    }

    // DynamoDB (every table call of both functions) through a gateway endpoint: no charge, and
    // no NAT data processing for the busiest traffic. SQS, SNS, Step Functions and the rest go
    // through the NAT gateways (interface endpoints would cost about $7.30 a month each per zone).
    this.dynamoDbEndpoint = new ec2.CfnVPCEndpoint(this, 'DynamoDbEndpoint', {
      vpcId: this.vpc.ref,
      serviceName: Fn.sub('com.amazonaws.${AWS::Region}.dynamodb'),
      vpcEndpointType: 'Gateway',
      routeTableIds: privateRouteTables.map((t) => t.ref),
    });

    this.securityGroup = new ec2.CfnSecurityGroup(this, 'SecurityGroup', {
      vpcId: this.vpc.ref,
      groupDescription: 'Tern sender and api: outbound TCP to receivers and AWS APIs, nothing inbound',
      // Replaces the default allow-all egress rule (all protocols) with TCP alone.
      securityGroupEgress: [
        {
          ipProtocol: 'tcp',
          fromPort: EGRESS_TCP_PORTS.from,
          toPort: EGRESS_TCP_PORTS.to,
          cidrIp: '0.0.0.0/0',
          description: 'Receivers on any port an endpoint URL may name, OAuth token URLs, AWS APIs over HTTPS',
        },
      ],
    });

    this.flowLogGroup = new logs.LogGroup(this, 'FlowLogGroup', {
      retention: props.logRetention,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.flowLogRole = new iam.Role(this, 'FlowLogRole', {
      // Confused-deputy guard: only flow logs of this account may use the role.
      assumedBy: new iam.ServicePrincipal('vpc-flow-logs.amazonaws.com', {
        conditions: { StringEquals: { 'aws:SourceAccount': stack.account } },
      }),
      description: 'Tern static egress: VPC flow logs to their log group',
    });
    // What the flow log service calls (VPC user guide, "IAM role for publishing flow logs to CloudWatch Logs"),
    // on its own log group only.
    this.flowLogGroup.grant(this.flowLogRole, 'logs:CreateLogStream', 'logs:PutLogEvents', 'logs:DescribeLogStreams');
    this.flowLog = new ec2.CfnFlowLog(this, 'FlowLog', {
      resourceId: this.vpc.ref,
      resourceType: 'VPC',
      trafficType: 'ALL',
      logDestinationType: 'cloud-watch-logs',
      logGroupName: this.flowLogGroup.logGroupName,
      deliverLogsPermissionArn: this.flowLogRole.roleArn,
      maxAggregationInterval: FLOW_LOG_AGGREGATION_SECONDS,
    });
    // The role's policy first: a flow log created before it cannot deliver its first records.
    this.flowLog.node.addDependency(this.flowLogRole);
  }

  /**
   * Runs `fn` in the private subnets with the security group, and grants its role what Lambda
   * needs to manage the function's network interfaces (the actions of AWSLambdaVPCAccessExecutionRole,
   * scoped; no managed policy). The function is created after the NAT routes exist, so its first
   * invocation can already reach receivers.
   */
  public attach(fn: lambda.Function, role: iam.Role): void {
    const cfn = fn.node.defaultChild as lambda.CfnFunction;
    cfn.vpcConfig = {
      subnetIds: this.privateSubnets.map((s) => s.ref),
      securityGroupIds: [this.securityGroup.attrGroupId],
    };
    for (const route of this.privateDefaultRoutes) cfn.node.addDependency(route);
    const stack = Stack.of(this);
    const eni = stack.formatArn({ service: 'ec2', resource: 'network-interface', resourceName: '*' });
    // Describe actions have no resource-level permissions (Lambda developer guide,
    // "Giving Lambda functions access to resources in an Amazon VPC": DescribeNetworkInterfaces
    // works only on "*").
    role.addToPolicy(
      new iam.PolicyStatement({ actions: ['ec2:DescribeNetworkInterfaces', 'ec2:DescribeSubnets'], resources: ['*'] }),
    );
    // Create: the new interface, in these subnets, with this security group.
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CreateNetworkInterface'],
        resources: [
          eni,
          ...this.privateSubnets.map((s) => stack.formatArn({ service: 'ec2', resource: 'subnet', resourceName: s.ref })),
          stack.formatArn({ service: 'ec2', resource: 'security-group', resourceName: this.securityGroup.attrGroupId }),
        ],
      }),
    );
    // Delete and re-address: interfaces of this account and Region (Lambda needs every interface
    // id it may have created, which are not known in advance).
    role.addToPolicy(
      new iam.PolicyStatement({
        actions: ['ec2:DeleteNetworkInterface', 'ec2:AssignPrivateIpAddresses', 'ec2:UnassignPrivateIpAddresses'],
        resources: [eni],
      }),
    );
  }
}
