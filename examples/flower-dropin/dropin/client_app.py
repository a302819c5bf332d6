"""dropin: a Flower ClientApp."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from reshuffle.flower import reshuffle_mod

from dropin.task import Net, load_data
from dropin.task import test as test_fn
from dropin.task import train as train_fn

# Flower ClientApp
app = ClientApp(mods=[reshuffle_mod])


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""
    torch.manual_seed(int(msg.content["config"]["server-round"]) * 1000 + int(context.node_config["partition-id"]))
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = "cpu"

    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    trainloader, _ = load_data(partition_id, num_partitions)

    train_loss = train_fn(model, trainloader, context.run_config["local-epochs"], msg.content["config"]["lr"], device)

    model_record = ArrayRecord(model.state_dict())
    metrics = {"train_loss": train_loss, "num-examples": len(trainloader.dataset)}
    content = RecordDict({"arrays": model_record, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on the test data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    _, valloader = load_data(partition_id, num_partitions)
    eval_loss, eval_acc = test_fn(model, valloader, "cpu")
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(valloader.dataset)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
